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
{{/* Where the controller's RBAC applies, as JSON {clusterWide, namespaces, secrets:
     {clusterWide, namespaces}}: `rbac.namespaces` when set; else every namespace the layers
     name (`namespaces` and `allowNamespaces`), unless some layer takes every namespace (no
     `namespaces`), which needs a ClusterRole. Secrets are written only where a layer replicates
     them from its upstream (`borrow.replicate` of kind Secret), or where `rbac.secretNamespaces`
     says (classes of your own that deploy Secrets). */}}
{{- define "comb.rbacScope" -}}
{{- $namespaces := list -}}
{{- $clusterWide := false -}}
{{- $secretNamespaces := list -}}
{{- $secretsClusterWide := false -}}
{{- range .Values.config.layers -}}
{{- if .namespaces -}}
{{- $namespaces = concat $namespaces .namespaces (.allowNamespaces | default list) -}}
{{- else -}}
{{- $clusterWide = true -}}
{{- end -}}
{{- $replicatesSecrets := false -}}
{{- range ((.borrow | default dict).replicate | default list) -}}
{{- if eq (.kind | default "") "Secret" -}}
{{- $replicatesSecrets = true -}}
{{- end -}}
{{- end -}}
{{- if $replicatesSecrets -}}
{{- if .namespaces -}}
{{- $secretNamespaces = concat $secretNamespaces .namespaces -}}
{{- else -}}
{{- $secretsClusterWide = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if .Values.rbac.namespaces -}}
{{- $namespaces = .Values.rbac.namespaces -}}
{{- $clusterWide = false -}}
{{- end -}}
{{- if .Values.rbac.secretNamespaces -}}
{{- $secretNamespaces = .Values.rbac.secretNamespaces -}}
{{- $secretsClusterWide = false -}}
{{- end -}}
{{- $secrets := dict "clusterWide" $secretsClusterWide "namespaces" ($secretNamespaces | uniq | sortAlpha) -}}
{{- dict "clusterWide" $clusterWide "namespaces" ($namespaces | uniq | sortAlpha) "secrets" $secrets | toJson -}}
{{- end -}}
{{/* The rules comb needs wherever it acts (a ClusterRole's or each namespace's Role). Secrets
     are read there (a class's prerequisites, a replica's source); writing them is
     "comb.secretWriterRules", granted only where replication needs it. */}}
{{- define "comb.rules" -}}
- apiGroups: [{{ .Values.config.group | default "comb.internal" | quote }}]
  resources: [combs]
  verbs: [get, list, watch, update, patch]
- apiGroups: [{{ .Values.config.group | default "comb.internal" | quote }}]
  resources: [combs/status]
  verbs: [get, update, patch]
- apiGroups: [""]
  resources: [services, configmaps, persistentvolumeclaims, serviceaccounts]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [secrets, pods]
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
{{- /* A Service that becomes a bridge loses its selector: the Endpoints its old selector kept go. */}}
- apiGroups: [""]
  resources: [endpoints]
  verbs: [get, delete]
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
{{- define "comb.secretWriterRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [create, update, patch, delete]
{{- end -}}
