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
{{/* Where the controller's RBAC applies in this cluster, as JSON {clusterWide, namespaces,
     secretWriters: {clusterWide, namespaces}, secretReaders: {clusterWide, namespaces}}. Only
     the layers whose context is in `rbac.contexts` count (all when it is empty: one cluster).
     `rbac.namespaces` when set; else every namespace those layers name (`namespaces` and
     `allowNamespaces`), unless one takes every namespace (no `namespaces`): a ClusterRole.

     Secrets only where the values name replication. Comb reads and writes them where copies
     land: the namespaces of a layer here that replicates (`borrow.replicate` of kind Secret, or
     an `allowUpstreams` entry with `replicate: true`). It reads them (get, by name) where copies
     come from, when the source's context is here and the replicating layer names no account
     (with `sourceServiceAccount` or a `serviceAccount`, the source is read as that fixed
     account, whose RBAC the source's administrator grants): `borrow.namespace`, else the
     layer's own namespaces; an entry's
     `namespaces`, else its layer's, else every namespace. `rbac.secretNamespaces` (read and
     write: Combs that deploy Secrets) and `rbac.secretReadNamespaces` (get: `requires.secrets`)
     add to what is derived. */}}
{{- define "comb.rbacScope" -}}
{{- $all := .Values.config.layers | default list -}}
{{- $contexts := .Values.rbac.contexts | default list -}}
{{- $namespaces := list -}}
{{- $clusterWide := false -}}
{{- $writeNamespaces := list -}}
{{- $writeClusterWide := false -}}
{{- $readNamespaces := list -}}
{{- $readClusterWide := false -}}
{{- range $layer := $all -}}
{{- $here := or (not $contexts) (has $layer.context $contexts) -}}
{{- if $here -}}
{{- if $layer.namespaces -}}
{{- $namespaces = concat $namespaces $layer.namespaces ($layer.allowNamespaces | default list) -}}
{{- else -}}
{{- $clusterWide = true -}}
{{- end -}}
{{- end -}}
{{- $borrow := $layer.borrow | default dict -}}
{{- $borrowsSecrets := false -}}
{{- range ($borrow.replicate | default list) -}}
{{- if eq (.kind | default "") "Secret" -}}
{{- $borrowsSecrets = true -}}
{{- end -}}
{{- end -}}
{{- $copying := list -}}
{{- range ($layer.allowUpstreams | default list) -}}
{{- if .replicate -}}
{{- $copying = append $copying . -}}
{{- end -}}
{{- end -}}
{{- if and $here (or $borrowsSecrets $copying) -}}
{{- if $layer.namespaces -}}
{{- $writeNamespaces = concat $writeNamespaces $layer.namespaces -}}
{{- else -}}
{{- $writeClusterWide = true -}}
{{- end -}}
{{- end -}}
{{- if not (or $layer.serviceAccount $layer.sourceServiceAccount) -}}
{{- if $borrowsSecrets -}}
{{- $sourceContext := "" -}}
{{- range $all -}}
{{- if eq .name $borrow.from -}}
{{- $sourceContext = .context -}}
{{- end -}}
{{- end -}}
{{- if or (not $contexts) (has $sourceContext $contexts) -}}
{{- if $borrow.namespace -}}
{{- $readNamespaces = append $readNamespaces $borrow.namespace -}}
{{- else if $layer.namespaces -}}
{{- $readNamespaces = concat $readNamespaces $layer.namespaces -}}
{{- else -}}
{{- $readClusterWide = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $entry := $copying -}}
{{- $sources := $entry.namespaces | default list -}}
{{- $sourceContext := $entry.context | default "" -}}
{{- if $entry.layer -}}
{{- range $all -}}
{{- if eq .name $entry.layer -}}
{{- $sourceContext = .context -}}
{{- if not $sources -}}
{{- $sources = .namespaces | default list -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if or (not $contexts) (has $sourceContext $contexts) -}}
{{- if $sources -}}
{{- $readNamespaces = concat $readNamespaces $sources -}}
{{- else -}}
{{- $readClusterWide = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if .Values.rbac.namespaces -}}
{{- $namespaces = .Values.rbac.namespaces -}}
{{- $clusterWide = false -}}
{{- end -}}
{{- $writeNamespaces = concat $writeNamespaces (.Values.rbac.secretNamespaces | default list) -}}
{{- $readNamespaces = concat $readNamespaces (.Values.rbac.secretReadNamespaces | default list) -}}
{{- $writeNamespaces = $writeNamespaces | uniq | sortAlpha -}}
{{- /* Where comb writes Secrets it reads them too: no second grant there. */ -}}
{{- $readOnly := list -}}
{{- range ($readNamespaces | uniq | sortAlpha) -}}
{{- if not (has . $writeNamespaces) -}}
{{- $readOnly = append $readOnly . -}}
{{- end -}}
{{- end -}}
{{- $writers := dict "clusterWide" $writeClusterWide "namespaces" $writeNamespaces -}}
{{- $readers := dict "clusterWide" (and $readClusterWide (not $writeClusterWide)) "namespaces" (ternary (list) $readOnly $writeClusterWide) -}}
{{- dict "clusterWide" $clusterWide "namespaces" ($namespaces | uniq | sortAlpha) "secretWriters" $writers "secretReaders" $readers | toJson -}}
{{- end -}}
{{/* The rules comb needs wherever it acts (a ClusterRole's or each namespace's Role). No
     Secrets: "comb.secretWriterRules" and "comb.secretReaderRules" are granted only where the
     values name replication (see "comb.rbacScope"). */}}
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
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [apps]
  resources: [deployments, statefulsets, daemonsets]
  verbs: [get, list, watch, create, update, patch, delete]
# Which ReplicaSet is a Deployment's current one: a rollout's old Pods' failures are not the verdict.
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [list]
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
{{/* Where copies land (and where classes deploy Secrets): their watch, the copies' writes,
     their prune. */}}
{{- define "comb.secretWriterRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end -}}
{{/* Where copies come from (and `requires.secrets`): one Secret by name, never a list. */}}
{{- define "comb.secretReaderRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- end -}}
