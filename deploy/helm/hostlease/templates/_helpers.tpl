{{/*
Labels of every object, the same as deploy/base's (deploy/helm_test.go
compares the rendered objects with the kustomize build): no Helm-specific
labels are added, so the two installs select and are selected alike.
*/}}
{{- define "hostlease.labels" -}}
app.kubernetes.io/name: hostlease-gc
app.kubernetes.io/part-of: hostlease
{{- end }}

{{/*
The host directory of the CRI socket (criEndpoint is unix:///<path>). It is
mounted at the same path in the daemon's container, and the directory rather
than the socket file is mounted: a runtime restart replaces the socket.
*/}}
{{- define "hostlease.criSocketDir" -}}
{{- $ep := .Values.criEndpoint -}}
{{- if not (hasPrefix "unix:///" $ep) -}}
{{- fail (printf "criEndpoint must be unix:///<absolute socket path>, got %q" $ep) -}}
{{- end -}}
{{- trimPrefix "unix://" $ep | dir -}}
{{- end }}

{{/*
--metrics-addr: host:port, an IPv6 host in brackets, an empty host for every
address of the node (the pod is on the host network).
*/}}
{{- define "hostlease.metricsAddr" -}}
{{- $h := .Values.metrics.host | default "" -}}
{{- if contains ":" $h -}}
[{{ $h }}]:{{ .Values.metrics.port }}
{{- else -}}
{{ $h }}:{{ .Values.metrics.port }}
{{- end -}}
{{- end }}

{{/*
The image reference of both containers: repository@digest when image.digest
is set (the tag is then not used), else repository:tag, the tag defaulting to
the chart's appVersion (a packaged release's version).
*/}}
{{- define "hostlease.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
The pod template's labels: the fixed ones (the DaemonSet's selector and the
Service's use app.kubernetes.io/name) and podLabels, which may not redefine
them.
*/}}
{{- define "hostlease.podLabels" -}}
{{- $fixed := include "hostlease.labels" . | fromYaml -}}
{{- range $k, $v := .Values.podLabels -}}
{{- if hasKey $fixed $k -}}
{{- fail (printf "podLabels may not set %s: the chart sets it, and the DaemonSet and the Service select the pods by the chart's labels" $k) -}}
{{- end -}}
{{- end -}}
{{ include "hostlease.labels" . }}
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}
