{{/* Chart name, overridable. */}}
{{- define "rocemesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name: RELEASE-rocemesh unless the release name has it already. */}}
{{- define "rocemesh.fullname" -}}
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

{{/* Labels that select one component's pods: call with (dict "root" $ "component" "server"). */}}
{{- define "rocemesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rocemesh.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every object's labels: call with (dict "root" $ "component" "server"). */}}
{{- define "rocemesh.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "rocemesh.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: rocemesh
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The image reference. */}}
{{- define "rocemesh.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* ServiceAccount of the server and the agents. */}}
{{- define "rocemesh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rocemesh.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the server's Service (and Deployment). */}}
{{- define "rocemesh.serverName" -}}
{{ include "rocemesh.fullname" . }}-server
{{- end }}

{{/* URL the agents use for the controller and the analyzer: the server Service. */}}
{{- define "rocemesh.serverUrl" -}}
http://{{ include "rocemesh.serverName" . }}.{{ .Release.Namespace }}.svc:{{ .Values.server.port }}
{{- end }}

{{/* Secret holding the bearer tokens (keys admin, read, agent). */}}
{{- define "rocemesh.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "rocemesh.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/* Where the server mounts the tokens Secret. */}}
{{- define "rocemesh.tokensDir" -}}
/run/secrets/rocemesh
{{- end }}

{{/* Secret and key holding the PostgreSQL URL. */}}
{{- define "rocemesh.databaseSecret" -}}
{{- default (printf "%s-database" (include "rocemesh.fullname" .)) .Values.database.postgresql.existingSecret }}
{{- end }}

{{/* Name of the agent's headless metrics Service. */}}
{{- define "rocemesh.agentName" -}}
{{ include "rocemesh.fullname" . }}-agent
{{- end }}

{{/* The RDMA mode in force: `auto` is devicePlugin when a node advertises the plugin's
  resource (looked up at install; `helm template` sees no cluster: hostPath). */}}
{{- define "rocemesh.rdmaMode" -}}
{{- if eq .Values.rdma.mode "auto" -}}
{{- $plugin := false -}}
{{- range (lookup "v1" "Node" "" "").items -}}
{{- if hasKey (default dict (default dict .status).allocatable) $.Values.rdma.resourceName -}}
{{- $plugin = true -}}
{{- end -}}
{{- end -}}
{{- ternary "devicePlugin" "hostPath" $plugin -}}
{{- else -}}
{{- .Values.rdma.mode -}}
{{- end -}}
{{- end -}}
