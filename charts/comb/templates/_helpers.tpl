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
