{{/* Names, labels and the pieces every relay pod shares. */}}

{{- define "relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "relay.fullname" -}}
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

{{/* "<fullname>-<component>", within 63 characters. Call with (list $ "api"). */}}
{{- define "relay.componentName" -}}
{{- $ctx := index . 0 -}}
{{- printf "%s-%s" (include "relay.fullname" $ctx | trunc 50 | trimSuffix "-") (index . 1) -}}
{{- end -}}

{{- define "relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "relay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels of one component's objects. Call with (list $ "api"). */}}
{{- define "relay.componentLabels" -}}
{{ include "relay.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The selector of one component's pods. Call with (list $ "api"). */}}
{{- define "relay.componentSelector" -}}
{{ include "relay.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "relay.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The chart's Secret: every secret value given inline in the values. */}}
{{- define "relay.secretName" -}}
{{- include "relay.fullname" . -}}
{{- end -}}

{{- define "relay.configName" -}}
{{- include "relay.fullname" . -}}
{{- end -}}

{{/* Secret values given inline, as a dict (empty when every one comes from a Secret
     the operator manages). Keys are the environment variables they become. */}}
{{/* "true" when the PostgreSQL archive is on, "" when off. Fails on an archive that is on
     without a DSN, or a DSN given while the archive is off. */}}
{{- define "relay.archive" -}}
{{- $a := .Values.archive -}}
{{- if $a.enabled -}}
{{- if not (or $a.existingSecret $a.url) -}}
{{- fail "archive.enabled needs archive.existingSecret (or archive.url): this chart runs no PostgreSQL" -}}
{{- end -}}
true
{{- else if or $a.existingSecret $a.url -}}
{{- fail "archive.existingSecret or archive.url is set but archive.enabled is false: set archive.enabled: true to turn the archive on" -}}
{{- end -}}
{{- end -}}

{{- define "relay.inlineSecrets" -}}
{{- $out := dict -}}
{{- if and (not .Values.redis.existingSecret) (not .Values.redis.password.existingSecret) -}}
{{- $_ := set $out "RELAY_REDIS_URL" (include "relay.redisURL" .) -}}
{{- end -}}
{{- if and .Values.apiTokens.value (not .Values.apiTokens.existingSecret) -}}
{{- $_ := set $out "RELAY_API_TOKENS" .Values.apiTokens.value -}}
{{- end -}}
{{- if and (include "relay.archive" .) .Values.archive.url (not .Values.archive.existingSecret) -}}
{{- $_ := set $out "RELAY_ARCHIVE_URL" .Values.archive.url -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* RELAY_REDIS_URL as the chart builds it from redis.url: with the password reference
     $(REDIS_PASSWORD) when the password comes from a Secret, and the TLS file options. */}}
{{- define "relay.redisURL" -}}
{{- $r := .Values.redis -}}
{{- if not $r.url -}}
{{- fail "redis.url (or redis.existingSecret) is required: relay keeps its state in Redis, and this chart runs none" -}}
{{- end -}}
{{- $u := urlParse $r.url -}}
{{- if not (has $u.scheme (list "redis" "rediss")) -}}
{{- fail (printf "redis.url must start with redis:// or rediss://, not %s://" $u.scheme) -}}
{{- end -}}
{{- if and $r.tls.enabled (ne $u.scheme "rediss") -}}
{{- fail "redis.tls.enabled needs a rediss:// redis.url" -}}
{{- end -}}
{{- $user := $u.userinfo -}}
{{- if $r.password.existingSecret -}}
{{- if contains ":" $user -}}
{{- fail "redis.url carries a password and redis.password.existingSecret names another: keep the password in the Secret only" -}}
{{- end -}}
{{- $user = printf "%s:$(REDIS_PASSWORD)" $user -}}
{{- end -}}
{{- $query := list -}}
{{- if $u.query -}}
{{- $query = append $query $u.query -}}
{{- end -}}
{{- if and $r.tls.enabled $r.tls.existingSecret -}}
{{- $query = append $query (printf "ssl_ca_certs=/etc/relay/redis-tls/%s" $r.tls.caKey) -}}
{{- if $r.tls.certKey -}}
{{- $query = append $query (printf "ssl_certfile=/etc/relay/redis-tls/%s" $r.tls.certKey) -}}
{{- $query = append $query (printf "ssl_keyfile=/etc/relay/redis-tls/%s" $r.tls.keyKey) -}}
{{- end -}}
{{- end -}}
{{- $auth := ternary (printf "%s@" $user) "" (ne $user "") -}}
{{- $q := ternary (printf "?%s" (join "&" $query)) "" (gt (len $query) 0) -}}
{{- printf "%s://%s%s%s%s" $u.scheme $auth $u.host $u.path $q -}}
{{- end -}}

{{/* The environment of the api, worker and migrate containers beside the ConfigMap:
     every secret value through a secretKeyRef. Call with (list $ "<chart Secret name>"). */}}
{{- define "relay.secretEnv" -}}
{{- $ := index . 0 -}}
{{- $secret := index . 1 -}}
{{- $r := $.Values.redis -}}
{{- if $r.existingSecret }}
- name: RELAY_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $r.existingSecret }}
      key: {{ $r.existingSecretKey }}
{{- else if $r.password.existingSecret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $r.password.existingSecret }}
      key: {{ $r.password.existingSecretKey }}
- name: RELAY_REDIS_URL
  value: {{ include "relay.redisURL" $ | quote }}
{{- else }}
- name: RELAY_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: RELAY_REDIS_URL
{{- end }}
{{- if and (eq $r.mode "sentinel") $r.sentinel.password.existingSecret }}
- name: RELAY_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $r.sentinel.password.existingSecret }}
      key: {{ $r.sentinel.password.existingSecretKey }}
{{- end }}
{{- if include "relay.archive" $ }}
- name: RELAY_ARCHIVE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.archive.existingSecret | default $secret }}
      key: {{ ternary $.Values.archive.existingSecretKey "RELAY_ARCHIVE_URL" (ne $.Values.archive.existingSecret "") }}
{{- end }}
{{- end -}}

{{/* RELAY_API_TOKENS for the api container. Call with (list $ "<chart Secret name>"). */}}
{{- define "relay.tokenEnv" -}}
{{- $ := index . 0 -}}
{{- $t := $.Values.apiTokens -}}
{{- if or $t.existingSecret $t.value }}
- name: RELAY_API_TOKENS
  valueFrom:
    secretKeyRef:
      name: {{ $t.existingSecret | default (index . 1) }}
      key: {{ ternary $t.existingSecretKey "RELAY_API_TOKENS" (ne $t.existingSecret "") }}
{{- end }}
{{- end -}}

{{/* The non-secret settings: the ConfigMap's data, and the migrate Job's env. */}}
{{- define "relay.settings" -}}
{{- $r := .Values.redis -}}
{{- $secret := list "RELAY_REDIS_URL" "RELAY_API_TOKENS" "RELAY_REDIS_SENTINEL_PASSWORD" "RELAY_OUTBOX_DSN" "RELAY_ARCHIVE_URL" -}}
{{- $owned := dict "RELAY_HOST" "api.port" "RELAY_PORT" "api.port" "RELAY_METRICS_PORT" "worker.metricsPort" "RELAY_REDIS_CLUSTER" "redis.mode" "RELAY_REDIS_SENTINELS" "redis.sentinel.addresses" "RELAY_REDIS_SENTINEL_MASTER" "redis.sentinel.master" "RELAY_ACK_REPLICAS" "redis.ackReplicas" "RELAY_ACK_TIMEOUT" "redis.ackTimeout" -}}
{{- range $k, $v := .Values.config -}}
{{- if has $k $secret -}}
{{- fail (printf "config.%s is a secret: it belongs in a Secret, never the ConfigMap (see values.yaml)" $k) -}}
{{- end -}}
{{- if hasKey $owned $k -}}
{{- fail (printf "config.%s is set by the chart from %s" $k (get $owned $k)) -}}
{{- end -}}
{{- if regexMatch "://[^/@]*:[^/@]+@" (toString $v) -}}
{{- fail (printf "config.%s holds a URL with a password: pass it through a Secret" $k) -}}
{{- end -}}
{{- end -}}
{{- if not (has $r.mode (list "standalone" "sentinel" "cluster")) -}}
{{- fail (printf "redis.mode must be standalone, sentinel or cluster, not %q" $r.mode) -}}
{{- end -}}
{{- $out := dict -}}
{{- range $k, $v := .Values.config -}}
{{- $_ := set $out $k (toString $v) -}}
{{- end -}}
{{- $_ := set $out "RELAY_HOST" "0.0.0.0" -}}
{{- $_ := set $out "RELAY_PORT" (toString .Values.api.port) -}}
{{- if eq $r.mode "cluster" -}}
{{- if gt (int $r.ackReplicas) 0 -}}
{{- fail "redis.ackReplicas needs a primary with replicas (standalone or sentinel), not a Redis Cluster" -}}
{{- end -}}
{{- $_ := set $out "RELAY_REDIS_CLUSTER" "1" -}}
{{- end -}}
{{- if eq $r.mode "sentinel" -}}
{{- if not $r.sentinel.addresses -}}
{{- fail "redis.mode sentinel needs redis.sentinel.addresses (host:port of every Sentinel)" -}}
{{- end -}}
{{- $_ := set $out "RELAY_REDIS_SENTINELS" (join "," $r.sentinel.addresses) -}}
{{- $_ := set $out "RELAY_REDIS_SENTINEL_MASTER" $r.sentinel.master -}}
{{- end -}}
{{- if gt (int $r.ackReplicas) 0 -}}
{{- $_ := set $out "RELAY_ACK_REPLICAS" (toString $r.ackReplicas) -}}
{{- $_ := set $out "RELAY_ACK_TIMEOUT" (toString $r.ackTimeout) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Spread constraints of one component: its own list, else the shared default.
     Call with (list $ "api" <component values>). */}}
{{- define "relay.topologySpread" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- $own := index . 2 -}}
{{- if $own.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml $own.topologySpreadConstraints | nindent 2 }}
{{- else if $.Values.topologySpread.enabled }}
topologySpreadConstraints:
{{- range $.Values.topologySpread.topologyKeys }}
  - maxSkew: {{ $.Values.topologySpread.maxSkew }}
    topologyKey: {{ . }}
    whenUnsatisfiable: {{ $.Values.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "relay.componentSelector" (list $ $component) | nindent 8 }}
    matchLabelKeys: [pod-template-hash]
{{- end }}
{{- end }}
{{- end -}}

{{/* The pod-level fields every relay pod shares. */}}
{{- define "relay.podCommon" -}}
enableServiceLinks: false
automountServiceAccountToken: false
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* The volumes every relay container mounts: a writable /tmp and the Redis TLS files. */}}
{{- define "relay.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if and .Values.redis.tls.enabled .Values.redis.tls.existingSecret }}
- name: redis-tls
  mountPath: /etc/relay/redis-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "relay.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if and .Values.redis.tls.enabled .Values.redis.tls.existingSecret }}
- name: redis-tls
  secret:
    secretName: {{ .Values.redis.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* Fails the render on values relay could not run with. */}}
{{- define "relay.validate" -}}
{{- if and (not .Values.apiTokens.existingSecret) (not .Values.apiTokens.value) (ne (toString (index .Values.config "RELAY_AUTH_DISABLED" | default "0")) "1") -}}
{{- fail "apiTokens.existingSecret is required: `relay api` refuses to start without RELAY_API_TOKENS (create the Secret: see values.yaml)" -}}
{{- end -}}
{{- if and .Values.redis.existingSecret (or .Values.redis.url .Values.redis.password.existingSecret) -}}
{{- fail "set one of redis.url (with redis.password) and redis.existingSecret (the whole URL), not both" -}}
{{- end -}}
{{- if and .Values.redis.tls.certKey (not .Values.redis.tls.keyKey) -}}
{{- fail "redis.tls.certKey needs redis.tls.keyKey" -}}
{{- end -}}
{{- if not (has .Values.worker.autoscaling.type (list "hpa" "keda")) -}}
{{- fail (printf "worker.autoscaling.type must be hpa or keda, not %q" .Values.worker.autoscaling.type) -}}
{{- end -}}
{{- if and .Values.httpRoute.enabled (not .Values.httpRoute.parentRefs) -}}
{{- fail "httpRoute.enabled needs httpRoute.parentRefs (the Gateway to attach to)" -}}
{{- end -}}
{{- if and .Values.ingress.enabled (not .Values.ingress.hosts) -}}
{{- fail "ingress.enabled needs ingress.hosts" -}}
{{- end -}}
{{- end -}}

{{/* Egress rules the api and the workers share: DNS, Redis, PostgreSQL with an
     archive, and networkPolicy.extraEgress. Call with (list $ <archive set>). */}}
{{- define "relay.egressCommon" -}}
{{- $ := index . 0 -}}
{{- $np := $.Values.networkPolicy -}}
- to:
    {{- toYaml $np.dns.to | nindent 4 }}
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
- to:
    {{- toYaml $np.redis.to | nindent 4 }}
  ports:
    {{- range $np.redis.ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
{{- if index . 1 }}
- to:
    {{- toYaml $np.postgres.to | nindent 4 }}
  ports:
    {{- range $np.postgres.ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
{{- end }}
{{- with $np.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- end -}}
