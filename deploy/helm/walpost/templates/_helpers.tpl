{{- define "walpost.labels" -}}
app.kubernetes.io/name: walpost
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "walpost.selector" -}}
app.kubernetes.io/name: walpost
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
