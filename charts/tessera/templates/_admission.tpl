{{/* Names of the admission webhook's objects. */}}
{{- define "tessera.admissionName" -}}{{ include "tessera.fullname" . }}-admission{{- end -}}
{{- define "tessera.admissionSecret" -}}{{ include "tessera.admissionName" . }}-tls{{- end -}}
{{- define "tessera.admissionServiceAccount" -}}
{{- $sa := .Values.admission.serviceAccount -}}
{{- if $sa.create -}}{{- default (include "tessera.admissionName" .) $sa.name -}}{{- else -}}{{- default "default" $sa.name -}}{{- end -}}
{{- end -}}

{{/* The CEL condition that sends only vGPU pods, and pods being created that name
ResourceClaims, to the webhook: the same expression as admission.MatchExpression (the chart tests compare them). The card count is the node
agent's resource name; the other three are Volcano's. */}}
{{- define "tessera.admissionMatch" -}}
{{- $list := printf "['%s', '%s', '%s', '%s']" .Values.devicePlugin.config.resourceName "volcano.sh/vgpu-memory" "volcano.sh/vgpu-memory-percentage" "volcano.sh/vgpu-cores" -}}
{{- $asks := printf "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, r in %s)) || (has(c.resources.requests) && c.resources.requests.exists(r, r in %s)))" $list $list -}}
{{- printf "object.spec.containers.exists(c, %s) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, %s)) || (request.operation == 'CREATE' && has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)" $asks $asks -}}
{{- end -}}

{{/* The webhook's configuration file (docs/admission.md). */}}
{{- define "tessera.admissionConfig" -}}
{{- $a := .Values.admission -}}
{{- $names := .Values.scheduler.schedulerNames -}}
{{- $conf := dict "version" "v1" "schedulerName" (default (first $names) $a.config.schedulerName) "schedulerNames" $names "defaultQueue" (default .Values.scheduler.defaultQueue $a.config.defaultQueue) "resources" (dict "number" .Values.devicePlugin.config.resourceName) -}}
{{- if $a.config.limits -}}{{- $_ := set $conf "limits" $a.config.limits -}}{{- end -}}
{{- if $a.config.queueGate -}}{{- $_ := set $conf "queueGate" true -}}{{- end -}}
{{- with $a.config.draConversion -}}{{- if .enabled -}}
{{- $d := dict "enabled" true "podOptIn" (default false .podOptIn) -}}
{{- if .deviceClassName -}}{{- $_ := set $d "deviceClassName" .deviceClassName -}}{{- end -}}
{{- if .cardMemoryMiB -}}{{- $_ := set $d "cardMemoryMiB" (int64 .cardMemoryMiB) -}}{{- end -}}
{{- if .minMemoryMiB -}}{{- $_ := set $d "minMemoryMiB" (int64 .minMemoryMiB) -}}{{- end -}}
{{- $_ := set $conf "draConversion" $d -}}
{{- end -}}{{- end -}}
{{- toYaml $conf -}}
{{- end -}}

{{/* Which namespaces the webhooks see: never kube-system, the release namespace (the
webhook's own pods) or admission.excludeNamespaces; only those with
admission.namespaceLabels when set. */}}
{{- define "tessera.admissionNamespaceSelector" -}}
{{- $a := .Values.admission -}}
{{- with $a.namespaceLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- toYaml (concat (list "kube-system" .Release.Namespace) $a.excludeNamespaces | uniq) | nindent 6 }}
{{- end -}}

{{/* The client config of one webhook; call with (list $ "/path"). The self-signed mode
keeps the caBundle an earlier release's webhook wrote (lookup is empty under helm
template; the webhook writes it then). */}}
{{- define "tessera.admissionClient" -}}
{{- $ := index . 0 -}}
service:
  name: {{ include "tessera.admissionName" $ }}
  namespace: {{ $.Release.Namespace }}
  path: {{ index . 1 }}
  port: 443
{{- if eq $.Values.admission.tls.mode "selfSigned" }}
{{- $s := lookup "v1" "Secret" $.Release.Namespace (include "tessera.admissionSecret" $) }}
{{- if and $s $s.data (index $s.data "ca.crt") }}
caBundle: {{ index $s.data "ca.crt" }}
{{- end }}
{{- end }}
{{- end -}}
