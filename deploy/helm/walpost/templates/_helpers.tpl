{{/* The chart's name, or nameOverride. */}}
{{- define "walpost.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: fullnameOverride, else <release>-<name>, or the
release name alone when it already contains the name. */}}
{{- define "walpost.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "walpost.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "walpost.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "walpost.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: walpost
{{- end -}}

{{- define "walpost.selector" -}}
app.kubernetes.io/name: {{ include "walpost.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "walpost.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "walpost.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "walpost.secretName" -}}
{{- default (include "walpost.fullname" .) .Values.secrets.name -}}
{{- end -}}

{{/* kafka.sasl.mechanism in upper case (walpost compares it so). */}}
{{- define "walpost.saslMechanism" -}}
{{- index .Values.config "kafka.sasl.mechanism" | default "" | toString | upper -}}
{{- end -}}

{{/* The secret files the chart mounts from the Secret and points walpost
at, one "KEY=file" per line, by kafka.sasl.mechanism:
  always                     postgres.url_file
  PLAIN, SCRAM-SHA-256/512   kafka.sasl.password_file
  OAUTHBEARER                kafka.sasl.oauth_token_file, unless config names one
  AWS_MSK_IAM                kafka.sasl.aws_secret_access_key_file, with kafka.sasl.aws_access_key_id
A key the config already sets (its value or its own file) is left alone. */}}
{{- define "walpost.secretFiles" -}}
{{- $c := .Values.config -}}
{{- $m := include "walpost.saslMechanism" . -}}
{{- $files := list -}}
{{- if not (hasKey $c "postgres.url_file") -}}
{{- $files = append $files (list "postgres.url_file" "postgres-url") -}}
{{- end -}}
{{- if and (has $m (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512")) (not (hasKey $c "kafka.sasl.password_file")) -}}
{{- $files = append $files (list "kafka.sasl.password_file" "kafka-sasl-password") -}}
{{- end -}}
{{- if and (eq $m "OAUTHBEARER") (not (hasKey $c "kafka.sasl.oauth_token_file")) -}}
{{- $files = append $files (list "kafka.sasl.oauth_token_file" "kafka-sasl-oauth-token") -}}
{{- end -}}
{{- if and (eq $m "AWS_MSK_IAM") (index $c "kafka.sasl.aws_access_key_id") (not (hasKey $c "kafka.sasl.aws_secret_access_key_file")) -}}
{{- $files = append $files (list "kafka.sasl.aws_secret_access_key_file" "kafka-sasl-aws-secret-access-key") -}}
{{- end -}}
{{- range $files }}
{{ index . 0 }}={{ index . 1 }}
{{- end -}}
{{- end -}}

{{/* Refuse, at install, the settings walpost would refuse at start. */}}
{{- define "walpost.validate" -}}
{{- $c := .Values.config -}}
{{- $m := include "walpost.saslMechanism" . -}}
{{- if not (index $c "kafka.brokers") -}}
{{- fail "config kafka.brokers is required" -}}
{{- end -}}
{{- if and (has $m (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512")) (not (index $c "kafka.sasl.username")) -}}
{{- fail (printf "config kafka.sasl.username is required with kafka.sasl.mechanism %s" $m) -}}
{{- end -}}
{{- /* walpost's clean stop takes up to kafka.flush_timeout (30s by
default); the kubelet's SIGKILL must come after it and the 15 s around it. */ -}}
{{- $ft := index $c "kafka.flush_timeout" | default "30s" | toString -}}
{{- $secs := 0 -}}
{{- if regexMatch "^[0-9]+s$" $ft -}}{{- $secs = trimSuffix "s" $ft | atoi -}}
{{- else if regexMatch "^[0-9]+m$" $ft -}}{{- $secs = mul (trimSuffix "m" $ft | atoi) 60 -}}
{{- end -}}
{{- if and $secs (le (int .Values.terminationGracePeriodSeconds) (add $secs 15)) -}}
{{- fail (printf "terminationGracePeriodSeconds %d must be above kafka.flush_timeout (%s) + 15s" (int .Values.terminationGracePeriodSeconds) $ft) -}}
{{- end -}}
{{- if eq $m "AWS_MSK_IAM" -}}
{{- if ne (index $c "kafka.tls.enabled" | toString) "true" -}}
{{- fail "config kafka.tls.enabled must be \"true\" with kafka.sasl.mechanism AWS_MSK_IAM (MSK's IAM listeners take TLS only)" -}}
{{- end -}}
{{- if not (index $c "kafka.sasl.aws_access_key_id") -}}
{{- $names := list -}}
{{- range .Values.extraEnv }}{{ $names = append $names .name }}{{ end -}}
{{- $role := index (.Values.serviceAccount.annotations | default dict) "eks.amazonaws.com/role-arn" -}}
{{- if and (not .Values.extraEnvFrom) (not $role) (not (has "AWS_ROLE_ARN" $names)) (not (and (has "AWS_ACCESS_KEY_ID" $names) (has "AWS_SECRET_ACCESS_KEY" $names))) -}}
{{- fail "kafka.sasl.mechanism AWS_MSK_IAM needs AWS credentials: a ServiceAccount role (serviceAccount.annotations eks.amazonaws.com/role-arn: IRSA), config kafka.sasl.aws_access_key_id with the Secret's kafka-sasl-aws-secret-access-key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE) through extraEnv or extraEnvFrom" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
