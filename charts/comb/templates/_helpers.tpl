{{- define "comb.fullname" -}}
{{- printf "%s-comb" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "comb.labels" -}}
app.kubernetes.io/name: comb
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
