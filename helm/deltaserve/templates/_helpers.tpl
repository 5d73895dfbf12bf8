{{/* Names, labels and shared fragments of the DeltaServe chart. */}}

{{- define "deltaserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "deltaserve.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "deltaserve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "deltaserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: call with (list $ "router") or (list $ "worker" "cpu"). */}}
{{- define "deltaserve.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "deltaserve.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- if gt (len .) 2 }}
deltaserve.io/pool: {{ index . 2 }}
{{- end }}
{{- end -}}

{{- define "deltaserve.routerName" -}}
{{- printf "%s-router" (include "deltaserve.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "deltaserve.redisName" -}}
{{- printf "%s-redis" (include "deltaserve.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A worker pool's Deployment and headless Service name: (list $ $pool). */}}
{{- define "deltaserve.workerName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-worker-%s" (include "deltaserve.fullname" $root) (index . 1).name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "deltaserve.image" -}}
{{- $root := index . 0 -}}
{{- printf "%s%s:%s" $root.Values.image.registry (index . 1) (default $root.Chart.AppVersion $root.Values.image.tag) -}}
{{- end -}}

{{- define "deltaserve.apiKeysSecret" -}}
{{- default (printf "%s-api-keys" (include "deltaserve.fullname" .)) .Values.apiKeys.existingSecret -}}
{{- end -}}

{{- define "deltaserve.redisUrlSecret" -}}
{{- default (printf "%s-redis-url" (include "deltaserve.fullname" .)) .Values.redis.external.existingSecret -}}
{{- end -}}

{{/* True when Redis is used at all (in-chart or external). */}}
{{- define "deltaserve.redisOn" -}}
{{- if or .Values.redis.enabled .Values.redis.external.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* The router's config file (docs/router.md); the workers are the pools' headless Services. */}}
{{- define "deltaserve.routerConfig" -}}
{{- $root := . -}}
{{- $workers := list -}}
{{- range (include "deltaserve.pools" . | fromJsonArray) -}}
{{- $workers = append $workers (printf "dns:///%s.%s.svc.cluster.local:%d" (include "deltaserve.workerName" (list $root .)) $root.Release.Namespace (int .grpcPort)) -}}
{{- end -}}
{{- $cfg := dict "listen" (printf "0.0.0.0:%d" (int .Values.router.port)) "workers" $workers "routing" .Values.config.routing "max_body_bytes" (int64 .Values.config.maxBodyBytes) "api_keys_file" "/etc/deltaserve/keys/api_keys" -}}
{{- if .Values.config.models }}{{ $_ := set $cfg "models" .Values.config.models }}{{ end -}}
{{- if .Values.config.aliases }}{{ $_ := set $cfg "aliases" .Values.config.aliases }}{{ end -}}
{{- $channel := dict -}}
{{- if .Values.workerChannel.mtls.enabled -}}
{{- $_ := set $channel "tls_ca_file" "/etc/deltaserve/tls/ca.crt" -}}
{{- $_ := set $channel "tls_cert_file" "/etc/deltaserve/tls/tls.crt" -}}
{{- $_ := set $channel "tls_key_file" "/etc/deltaserve/tls/tls.key" -}}
{{- end -}}
{{- if .Values.workerChannel.sharedSecret.enabled -}}
{{- $_ := set $channel "secret_env" "DELTASERVE_WORKER_SECRET" -}}
{{- end -}}
{{- if $channel }}{{ $_ := set $cfg "worker_channel" $channel }}{{ end -}}
{{- if .Values.upstreams -}}
{{- $upstreams := list -}}
{{- range .Values.upstreams -}}
{{- $u := dict "name" .name "kind" (.kind | default "openai") "base_url" .baseUrl "model" .model -}}
{{- if .apiKeySecret }}{{ $_ := set $u "api_key_file" (printf "/etc/deltaserve/upstreams/%s/api_key" .name) }}{{ end -}}
{{- if and .caSecret .caSecret.name }}{{ $_ := set $u "tls_ca_file" (printf "/etc/deltaserve/upstreams/%s/ca.crt" .name) }}{{ end -}}
{{- $upstreams = append $upstreams (merge $u (.extra | default dict)) -}}
{{- end -}}
{{- $_ := set $cfg "upstreams" $upstreams -}}
{{- end -}}
{{- toYaml (merge $cfg .Values.config.extra) -}}
{{- end -}}

{{- define "deltaserve.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}

{{- define "deltaserve.securityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}

{{/* The worker pools, each workerDefaults with the pool's keys laid over it, as JSON (read back
     with fromJsonArray: numbers come back as floats, so templates pass them through int). */}}
{{- define "deltaserve.pools" -}}
{{- $pools := list -}}
{{- range .Values.workerPools -}}
{{- $pools = append $pools (mergeOverwrite (deepCopy $.Values.workerDefaults) (deepCopy .)) -}}
{{- end -}}
{{- toJson $pools -}}
{{- end -}}
