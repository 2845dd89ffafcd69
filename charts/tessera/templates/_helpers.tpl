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

{{/* Annotations of a component's pod template: the chart's own (checksums that roll the pods)
over the user's <component>.podAnnotations, which may be absent (a release upgraded with
--reuse-values keeps the older chart's values). Call with (list $own $user). */}}
{{- define "tessera.podAnnotations" -}}
{{- $own := index . 0 -}}{{- $user := index . 1 | default dict -}}
{{- toYaml (merge (deepCopy $own) $user) -}}
{{- end -}}

{{/* Selector labels of one component; call with (list $ "scheduler"). */}}
{{- define "tessera.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ default "tessera" $.Values.nameOverride }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Image reference; call with (list $ .Values.scheduler.image). With a digest the image is
pulled by digest (repository@sha256:...): a tag that moves cannot change what runs. */}}
{{- define "tessera.image" -}}
{{- $ := index . 0 -}}{{- $img := index . 1 -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default $.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Kubernetes username of a component's ServiceAccount; call with (list $ "scheduler"). */}}
{{- define "tessera.serviceAccountUser" -}}
{{- $ := index . 0 -}}
{{- printf "system:serviceaccount:%s:%s" $.Release.Namespace (include "tessera.serviceAccountName" .) -}}
{{- end -}}

{{/* Secret of the scheduler's assignment signing keys, and ConfigMap of their public halves
(what the agents verify assignments with). The scheduler creates both. */}}
{{- define "tessera.signingSecretName" -}}{{ include "tessera.fullname" . }}-assignment-signing{{- end -}}
{{- define "tessera.assignmentKeysName" -}}{{ include "tessera.fullname" . }}-assignment-keys{{- end -}}

{{/* namespace/name of the ConfigMap of public keys the agents read. */}}
{{- define "tessera.assignmentKeysRef" -}}
{{- default (printf "%s/%s" .Release.Namespace (include "tessera.assignmentKeysName" .)) .Values.devicePlugin.config.assignmentKeys -}}
{{- end -}}

{{/* Pod annotations only Tessera's scheduler writes, and the node agent's handoff
annotations (api/keys.go, api/signature.go), as a JSON list (a CEL list literal too). */}}
{{- define "tessera.schedulerPodKeys" -}}
["tessera.io/assignment","tessera.io/assignment-signature","tessera.io/assigned-at","volcano.sh/vgpu-ids-new","volcano.sh/devices-to-allocate","volcano.sh/vgpu-node","volcano.sh/vgpu-time","volcano.sh/bind-phase","volcano.sh/bind-time"]
{{- end -}}
{{- define "tessera.handoffPodKeys" -}}
["tessera.io/handoff","tessera.io/handoff-message"]
{{- end -}}

{{/* Node annotations the agent writes (deviceplugin/inventory): the inventory, its
heartbeat, the cards' CUDA context reserves, the MIG layout, the card API it serves
(tessera.io/card-api), and with volcanoCompat the HAMi/Volcano register and handshake. */}}
{{- define "tessera.agentNodeKeys" -}}
{{- $k := list "tessera.io/inventory" "tessera.io/heartbeat" "tessera.io/context-reserve" "tessera.io/mig-instances" "tessera.io/card-api" -}}
{{- if .Values.devicePlugin.config.volcanoCompat -}}{{- $k = concat $k (list "volcano.sh/node-vgpu-register" "volcano.sh/node-vgpu-handshake") -}}{{- end -}}
{{- toJson $k -}}
{{- end -}}

{{/* Users allowed to write the scheduler's pod annotations: the chart's scheduler and
admissionPolicy.extraSchedulerUsers, as a JSON list. */}}
{{- define "tessera.schedulerUsers" -}}
{{- $u := list -}}
{{- if .Values.scheduler.enabled -}}{{- $u = append $u (include "tessera.serviceAccountUser" (list . "scheduler")) -}}{{- end -}}
{{- toJson (concat $u .Values.admissionPolicy.extraSchedulerUsers | uniq) -}}
{{- end -}}

{{/* Resource names that make a pod a vGPU pod: the agent's resourceName, the other three
vGPU resources (api/keys.go) and admissionPolicy.extraResourceNames, as a JSON list. */}}
{{- define "tessera.vgpuResourceNames" -}}
{{- $r := list .Values.devicePlugin.config.resourceName "volcano.sh/vgpu-number" "volcano.sh/vgpu-memory" "volcano.sh/vgpu-memory-percentage" "volcano.sh/vgpu-cores" -}}
{{- toJson (concat $r .Values.admissionPolicy.extraResourceNames | uniq) -}}
{{- end -}}

{{/* What the scheduler's configuration uses beyond the shipped one, for its RBAC: the
conf text (generated or override) and the extra flags. Each is "true" or "". */}}
{{- define "tessera.schedulerEvicts" -}}
{{- if regexMatch "(^|[^a-zA-Z])(preempt|reclaim|shuffle)([^a-zA-Z]|$)" (include "tessera.schedulerActions" .) -}}true{{- end -}}
{{- end -}}
{{- define "tessera.schedulerActions" -}}
{{- if .Values.scheduler.conf.override -}}
{{- range (splitList "\n" .Values.scheduler.conf.override) -}}{{- if regexMatch "^\\s*actions\\s*:" . -}}{{ . }}{{- end -}}{{- end -}}
{{- else -}}
{{- .Values.scheduler.conf.actions -}}
{{- end -}}
{{- end -}}
{{- define "tessera.schedulerUsesDeviceshare" -}}
{{- if regexMatch "name:\\s*[\"']?deviceshare" (include "tessera.schedulerConf" .) -}}true{{- end -}}
{{- end -}}
{{- /* The scheduler patches pods for deviceshare, and to remove the queue gate the admission webhook puts on vGPU pods. */ -}}
{{- define "tessera.schedulerPatchesPods" -}}
{{- if or (include "tessera.schedulerUsesDeviceshare" .) (and .Values.admission.enabled .Values.admission.config.queueGate) -}}true{{- end -}}
{{- end -}}
{{- /* The vgpu plugin writes MIG plans on Nodes when the agents may re-partition cards. */ -}}
{{- define "tessera.schedulerPatchesNodes" -}}
{{- if or (include "tessera.schedulerUsesDeviceshare" .) (and .Values.devicePlugin.enabled .Values.devicePlugin.config.migRepartition) -}}true{{- end -}}
{{- end -}}
{{- define "tessera.schedulerUsesDRA" -}}
{{- if regexMatch "DynamicResourceAllocationEnable[\"']?\\s*:\\s*[\"']?(true|True)" (include "tessera.schedulerConf" .) -}}true{{- end -}}
{{- end -}}
{{- define "tessera.schedulerSharded" -}}
{{- if regexMatch "--scheduler-sharding-mode[= ]+(hard|soft)" (join " " .Values.scheduler.extraArgs) -}}true{{- end -}}
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

{{/* The agent container's security context: devicePlugin.securityContext, with CAP_KILL
added when the memory guard may kill (mode enforce, in the host's pid namespace): the
processes it stops run under the workloads' users. */}}
{{- define "tessera.agentSecurityContext" -}}
{{- $sc := deepCopy (default dict .Values.devicePlugin.securityContext) -}}
{{- if and (eq (include "tessera.agentHostPID" .) "true") (eq (toString .Values.devicePlugin.config.memoryGuard.mode) "enforce") -}}
{{- $caps := default dict $sc.capabilities -}}
{{- $add := default list $caps.add -}}
{{- if not (has "KILL" $add) -}}{{- $add = append $add "KILL" -}}{{- end -}}
{{- $_ := set $caps "add" $add -}}
{{- $_ := set $sc "capabilities" $caps -}}
{{- end -}}
{{- toYaml $sc -}}
{{- end -}}

{{/* Whether the agent runs in the host's pid namespace: devicePlugin.hostPID when set, else
whether the memory guard is on (the one feature that needs it), with either card API: on a
DRA node it holds each pod to its prepared claims. */}}
{{- define "tessera.agentHostPID" -}}
{{- if kindIs "bool" .Values.devicePlugin.hostPID -}}
{{- .Values.devicePlugin.hostPID -}}
{{- else -}}
{{- ne (toString .Values.devicePlugin.config.memoryGuard.mode) "off" -}}
{{- end -}}
{{- end -}}

