{{/* Base name of every object: fullnameOverride, else <release>-<nameOverride or "tessera">
(the release name alone when it already contains that), cut to 52 characters so that
suffixes such as "-vgpu-device-plugin" stay within DNS limits. */}}
{{- define "tessera.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default "tessera" .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tessera.schedulerName" -}}{{ include "tessera.fullname" . }}-scheduler{{- end -}}
{{- define "tessera.agentName" -}}{{ include "tessera.fullname" . }}-vgpu-device-plugin{{- end -}}

{{/* ServiceAccount of a component; call with (list $ "scheduler"|"devicePlugin"). Created
by the chart: the given name or the component's object name. Not created: the given name,
else the namespace's "default". */}}
{{- define "tessera.serviceAccountName" -}}
{{- $ := index . 0 -}}{{- $c := index . 1 -}}
{{- $sa := (index $.Values $c).serviceAccount -}}
{{- if $sa.create -}}
{{- default (include (ternary "tessera.schedulerName" "tessera.agentName" (eq $c "scheduler")) $) $sa.name -}}
{{- else -}}
{{- default "default" $sa.name -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "tessera.labels" -}}
app.kubernetes.io/name: {{ default "tessera" .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of a component's pod template: its selector labels and commonLabels, without
the chart's version, so that a chart upgrade that changes nothing in the pods restarts none
of them (a new image tag or configuration still rolls them). Call with (list $ "scheduler"). */}}
{{- define "tessera.podLabels" -}}
{{- $ := index . 0 -}}
{{ include "tessera.selector" . }}
{{- with $.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component; call with (list $ "scheduler"). */}}
{{- define "tessera.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ default "tessera" $.Values.nameOverride }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Image reference; call with (list $ .Values.scheduler.image). */}}
{{- define "tessera.image" -}}
{{- $ := index . 0 -}}{{- $img := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* The vgpu plugin entry appended to the first tier. */}}
{{- define "tessera.vgpuPlugin" -}}
{{- $v := .Values.scheduler.vgpu -}}
name: vgpu
arguments:
  vgpu.NodePolicy: {{ $v.nodePolicy }}
  vgpu.CardPolicy: {{ $v.cardPolicy }}
  vgpu.Weight: {{ $v.weight }}
  vgpu.TopologyWeight: {{ $v.topologyWeight }}
  vgpu.MemoryOversubscription: {{ $v.memoryOversubscription }}
  vgpu.HeartbeatTimeout: {{ $v.heartbeatTimeout | quote }}
  vgpu.PendingTTL: {{ $v.pendingTTL | quote }}
  vgpu.QueueShare: {{ $v.queueShare }}
  vgpu.VolcanoCompat: {{ $v.volcanoCompat }}
  vgpu.ResourceNumber: {{ .Values.devicePlugin.config.resourceName | quote }}
{{- end -}}

{{/* volcano-scheduler.conf: the override verbatim, or generated from scheduler.conf with the
vgpu plugin appended to the first tier (Volcano asks the first tier whose plugins offer
victims which pods preempt and reclaim may evict; vgpu must be among them to offer only pods
whose cards help). Either way deviceshare.VGPUEnable must stay off. */}}
{{- define "tessera.schedulerConf" -}}
{{- $c := .Values.scheduler.conf -}}
{{- if $c.override -}}
{{- if regexMatch "deviceshare\\.VGPUEnable\"?'?\\s*:\\s*\"?'?(true|True|TRUE)" $c.override -}}
{{- fail "scheduler.conf.override enables deviceshare.VGPUEnable: Tessera's vgpu plugin and Volcano's deviceshare must not both manage the vGPU resources" -}}
{{- end -}}
{{- $c.override -}}
{{- else -}}
{{- if not $c.tiers -}}{{- fail "scheduler.conf.tiers must list at least one tier" -}}{{- end -}}
{{- $tiers := list -}}
{{- range $i, $t := $c.tiers -}}
{{- range $p := $t.plugins -}}
{{- if eq $p.name "vgpu" -}}{{- fail "scheduler.conf.tiers must not list vgpu: the chart adds it from scheduler.vgpu" -}}{{- end -}}
{{- if and (eq $p.name "deviceshare") $p.arguments -}}
{{- if eq (toString (index $p.arguments "deviceshare.VGPUEnable")) "true" -}}
{{- fail "scheduler.conf.tiers: deviceshare.VGPUEnable is true; Tessera's vgpu plugin and Volcano's deviceshare must not both manage the vGPU resources" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $plugins := $t.plugins -}}
{{- if eq $i 0 -}}{{- $plugins = append $plugins (include "tessera.vgpuPlugin" $ | fromYaml) -}}{{- end -}}
{{- $tiers = append $tiers (dict "plugins" $plugins) -}}
{{- end -}}
{{- $conf := dict "actions" $c.actions "tiers" $tiers -}}
{{- if $c.configurations -}}{{- $_ := set $conf "configurations" $c.configurations -}}{{- end -}}
{{- toYaml $conf -}}
{{- end -}}
{{- end -}}
