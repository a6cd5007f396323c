{{/* The release name when it already says comb (`helm install comb` gives `comb`, not
     `comb-comb`), else `<release>-comb`. */}}
{{- define "comb.fullname" -}}
{{- if contains "comb" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-comb" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- define "comb.labels" -}}
app.kubernetes.io/name: comb
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "comb.webhookName" -}}
{{- printf "%s-webhook" (include "comb.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "comb.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "comb.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "comb.webhookDNSNames" -}}
{{- $service := include "comb.webhookName" . -}}
{{- $domain := .Values.config.clusterDomain | default "cluster.local" -}}
- {{ printf "%s.%s.svc" $service .Release.Namespace }}
- {{ printf "%s.%s.svc.%s" $service .Release.Namespace $domain }}
{{- end -}}
{{/* Where the controller's RBAC applies, as JSON {clusterWide, namespaces}: `rbac.namespaces`
     when set; else every namespace the layers name (`namespaces` and `allowNamespaces`), unless
     some layer takes every namespace (no `namespaces`), which needs a ClusterRole. */}}
{{- define "comb.rbacScope" -}}
{{- $namespaces := list -}}
{{- $clusterWide := false -}}
{{- if .Values.rbac.namespaces -}}
{{- $namespaces = .Values.rbac.namespaces -}}
{{- else -}}
{{- range .Values.config.layers -}}
{{- if .namespaces -}}
{{- $namespaces = concat $namespaces .namespaces (.allowNamespaces | default list) -}}
{{- else -}}
{{- $clusterWide = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "clusterWide" $clusterWide "namespaces" ($namespaces | uniq | sortAlpha) | toJson -}}
{{- end -}}
{{/* The rules comb needs wherever it acts (a ClusterRole's or each namespace's Role). */}}
{{- define "comb.rules" -}}
- apiGroups: [{{ .Values.config.group | default "comb.internal" | quote }}]
  resources: [combs]
  verbs: [get, list, watch, update, patch]
- apiGroups: [{{ .Values.config.group | default "comb.internal" | quote }}]
  resources: [combs/status]
  verbs: [get, update, patch]
- apiGroups: [""]
  resources: [services, configmaps, secrets, persistentvolumeclaims, serviceaccounts]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [apps]
  resources: [deployments, statefulsets, daemonsets]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [batch]
  resources: [jobs, cronjobs]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [ingresses]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- with .Values.extraRules }}
{{ toYaml . }}
{{- end }}
{{- end -}}
