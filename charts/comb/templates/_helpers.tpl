{{- define "comb.fullname" -}}
{{- printf "%s-comb" .Release.Name | trunc 63 | trimSuffix "-" -}}
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
