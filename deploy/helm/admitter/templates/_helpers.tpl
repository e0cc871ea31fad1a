{{/* The chart's name, or nameOverride. */}}
{{- define "admitter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: fullnameOverride, or <release>-<name> (the release name alone when it
contains the chart's name), at most 63 characters. */}}
{{- define "admitter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels that select the pods: the Deployment's, the Service's and the PDB's selector. */}}
{{- define "admitter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "admitter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Every object's labels. */}}
{{- define "admitter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "admitter.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ServiceAccount the pods run as: the chart's, a named one, or the namespace's default. */}}
{{- define "admitter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "admitter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret mounted at /etc/admitter/secrets: the chart's or secrets.existingSecret. */}}
{{- define "admitter.secretName" -}}
{{- default (include "admitter.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* What the Secret may hold: each key, the value it is made from (without existingSecret)
and the variable that names its file (README, "Configuration": ADMITTER_NATS_CREDS is a
file; the others are <NAME>_FILE forms of secrets). A YAML list, read with fromYamlArray. */}}
{{- define "admitter.secretFiles" -}}
- {key: nats.creds, value: natsCreds, env: ADMITTER_NATS_CREDS}
- {key: nats-password, value: natsPassword, env: ADMITTER_NATS_PASSWORD_FILE}
- {key: nats-token, value: natsToken, env: ADMITTER_NATS_TOKEN_FILE}
- {key: redis-password, value: redisPassword, env: ADMITTER_REDIS_PASSWORD_FILE}
- {key: http-token, value: httpToken, env: ADMITTER_HTTP_TOKEN_FILE}
- {key: console-token, value: consoleToken, env: ADMITTER_CONSOLE_TOKEN_FILE}
{{- end }}

{{/* The entries of admitter.secretFiles the Secret holds: those of secrets.existingSecretKeys,
or those whose value is set. A YAML list, read with fromYamlArray; empty: no Secret. */}}
{{- define "admitter.secretsUsed" -}}
{{- $s := .Values.secrets }}
{{- $used := list }}
{{- range fromYamlArray (include "admitter.secretFiles" .) }}
{{- if $s.existingSecret }}
{{- if has .key $s.existingSecretKeys }}{{ $used = append $used . }}{{ end }}
{{- else if index $s .value }}
{{- $used = append $used . }}
{{- end }}
{{- end }}
{{- if $used }}{{ toYaml $used }}{{ end }}
{{- end }}

{{/* The variables the chart sets itself, which env may not set again. */}}
{{- define "admitter.chartVariables" -}}
- ADMITTER_REPLICA
- ADMITTER_NATS_URL
- ADMITTER_NATS_USER
- ADMITTER_REDIS_URL
- ADMITTER_REDIS_USERNAME
- ADMITTER_PLANS_FILE
- ADMITTER_PARTITIONS
- ADMITTER_HTTP_ADDR
- ADMITTER_API_ADDR
{{- range fromYamlArray (include "admitter.secretFiles" .) }}
- {{ .env }}
{{- end }}
{{- end }}

{{/* The input stream: ADMITTER_STREAM_IN in env, else admitter's default. */}}
{{- define "admitter.streamIn" -}}
{{- default "JOBS" (index .Values.env "ADMITTER_STREAM_IN") }}
{{- end }}

{{/* The account mapping the NATS server needs with partitions above 1, the line admitter logs
at start (subjects.Partitions.Mapping): the input's subjects (ADMITTER_SUBJECT_IN, {tenant} as
*) to admitter.<stream>.<N>.{{partition(N,k)}}.<the subject>, each wildcard carried and k the
tenant's. Empty for one partition. */}}
{{- define "admitter.partitionsMapping" -}}
{{- $n := int .Values.partitions }}
{{- if gt $n 1 }}
{{- $in := default "jobs.submit.{tenant}.>" (index .Values.env "ADMITTER_SUBJECT_IN") }}
{{- $src := list }}
{{- $dst := list }}
{{- $k := 0 }}
{{- $tenantAt := 0 }}
{{- range splitList "." $in }}
{{- if or (eq . "{tenant}") (eq . "*") }}
{{- $k = add1 $k }}
{{- if eq . "{tenant}" }}{{ $tenantAt = $k }}{{ end }}
{{- $src = append $src "*" }}
{{- $dst = append $dst (printf "{{wildcard(%d)}}" $k) }}
{{- else }}
{{- $src = append $src . }}
{{- $dst = append $dst . }}
{{- end }}
{{- end }}
{{- $to := printf "admitter.%s.%d.{{partition(%d,%d)}}.%s" (include "admitter.streamIn" .) $n $n $tenantAt (join "." $dst) }}
{{- printf "mappings { %q: %q }" (join "." $src) $to }}
{{- end }}
{{- end }}
