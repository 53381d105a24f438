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

{{/* The image reference of both containers. */}}
{{- define "hostlease.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}
