{{- define "kiln-serve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kiln-serve.fullname" -}}
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

{{- define "kiln-serve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kiln-serve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kiln-serve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kiln-serve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: inference-server
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ConfigMap-shipped repository: a ConfigMap key may not hold "/", so a path's "/" becomes "--". */}}
{{- define "kiln-serve.configMapKey" -}}
{{- $path := . -}}
{{- if or (not (regexMatch "^[-._a-zA-Z0-9]+(/[-._a-zA-Z0-9]+)*$" $path)) (contains "--" $path) (regexMatch "(^|/)\\.\\.?(/|$)" $path) -}}
{{- fail (printf "modelRepository.configMap: path %q must be relative, of [-._a-zA-Z0-9] separated by '/', without '.', '..' or '--'" $path) -}}
{{- end -}}
{{- replace "/" "--" $path -}}
{{- end }}

{{- define "kiln-serve.hasConfigMapRepository" -}}
{{- if or .Values.modelRepository.configMap.files .Values.modelRepository.configMap.binaryFiles }}true{{ end }}
{{- end }}

{{/* preStop: "sleep" (the kubelet's sleep action) or "exec" (`sleep` run in the image). */}}
{{- define "kiln-serve.preStopMode" -}}
{{- $mode := .Values.lifecycle.preStopMode -}}
{{- if eq $mode "auto" -}}
{{- if semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version }}sleep{{ else }}exec{{ end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end }}

{{/*
The grace period covers the preStop sleep, then kiln-serve's drain after SIGTERM: up to
--exit-timeout-secs for accepted requests, then up to 3 s for the ones it cancelled
(docs/SERVER.md), before the kubelet's SIGKILL.
*/}}
{{- define "kiln-serve.minGracePeriod" -}}
{{- add (int .Values.lifecycle.preStopSleepSeconds) (int .Values.server.exitTimeoutSecs) 3 -}}
{{- end }}

{{- define "kiln-serve.gracePeriod" -}}
{{- $min := int (include "kiln-serve.minGracePeriod" .) -}}
{{- $set := .Values.lifecycle.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $set -}}
{{- add $min 5 -}}
{{- else if lt (int $set) $min -}}
{{- fail (printf "lifecycle.terminationGracePeriodSeconds (%d) must be at least preStopSleepSeconds (%d) + server.exitTimeoutSecs (%d) + 3 s = %d, or kiln-serve is killed mid-drain" (int $set) (int .Values.lifecycle.preStopSleepSeconds) (int .Values.server.exitTimeoutSecs) $min) -}}
{{- else -}}
{{- int $set -}}
{{- end -}}
{{- end }}

{{/* The main repository's volume source: modelRepository.volume, else the claim, else none. */}}
{{- define "kiln-serve.repositoryVolume" -}}
{{- if .Values.modelRepository.volume -}}
{{- toYaml .Values.modelRepository.volume -}}
{{- else if .Values.modelRepository.persistentVolumeClaim -}}
persistentVolumeClaim:
  claimName: {{ .Values.modelRepository.persistentVolumeClaim }}
  readOnly: true
{{- end -}}
{{- end }}
