{{- define "tmc.fullname" -}}
{{- printf "%s-tmc" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tmc.labels" -}}
app.kubernetes.io/name: tmc
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tmc.selector" -}}
app.kubernetes.io/name: tmc
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The one image (./dev image builds it); a digest, when given, pins it exactly. */}}
{{- define "tmc.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "tmc.secretName" -}}
{{- default (include "tmc.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{/* The service's settings, as TMC_* variables (api/settings.py). */}}
{{- define "tmc.env" -}}
- name: TMC_ENVIRONMENT
  value: production
- name: TMC_DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ include "tmc.secretName" . }}, key: database-url}
- name: TMC_REDIS_URL
  valueFrom:
    secretKeyRef: {name: {{ include "tmc.secretName" . }}, key: redis-url}
{{- end -}}

{{/* The Secret with the extender's TLS material. */}}
{{- define "tmc.extenderTLSSecret" -}}
{{- default (printf "%s-extender-tls" (include "tmc.fullname" .)) .Values.extender.tls.existingSecret -}}
{{- end -}}

{{/* The Secret with the first operator token (key operator-token). */}}
{{- define "tmc.bootstrapSecret" -}}
{{- default (printf "%s-bootstrap" (include "tmc.fullname" .)) .Values.bootstrap.existingSecret -}}
{{- end -}}

{{/* The Secret with the node agents' API token (key token). */}}
{{- define "tmc.agentTokenSecret" -}}
{{- default (printf "%s-agent-token" (include "tmc.fullname" .)) .Values.agent.token.existingSecret -}}
{{- end -}}

{{/* plugin.maxPairsPerNamespace, checked: a whole number in 1..100000. */}}
{{- define "tmc.maxPairsPerNamespace" -}}
{{- $v := .Values.plugin.maxPairsPerNamespace -}}
{{- $ok := false -}}
{{- if or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) -}}
{{- if and (eq (float64 $v) (float64 (int64 $v))) (ge (int64 $v) 1) (le (int64 $v) 100000) -}}
{{- $ok = true -}}
{{- end -}}
{{- end -}}
{{- if not $ok -}}
{{- fail (printf "plugin.maxPairsPerNamespace must be a whole number in 1..100000, not %v" $v) -}}
{{- end -}}
{{- int64 $v -}}
{{- end -}}

{{/* The metrics reader's token Secret (scrapes tmc-scheduler's /metrics). */}}
{{- define "tmc.metricsReaderSecret" -}}
{{- printf "%s-metrics-reader-token" (include "tmc.fullname" .) -}}
{{- end -}}

{{/* agent.identity.expirationSeconds, checked: the kubelet asks for 600..86400 seconds. */}}
{{- define "tmc.agentTokenSeconds" -}}
{{- $v := .Values.agent.identity.expirationSeconds -}}
{{- if not (and (or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v)) (ge (float64 $v) 600.0) (le (float64 $v) 86400.0)) -}}
{{- fail (printf "agent.identity.expirationSeconds must be 600..86400, not %v" $v) -}}
{{- end -}}
{{- int64 $v -}}
{{- end -}}

{{/* The Secret holding the placement seal's keys (placementSeal). */}}
{{- define "tmc.placementSealSecret" -}}
{{- .Values.placementSeal.existingSecret | default (printf "%s-placement-seal" (include "tmc.fullname" .)) -}}
{{- end -}}

{{/* The placement seal's keys as a volume, for a pod whose containers mount it (placementSeal). */}}
{{- define "tmc.placementSealVolume" -}}
{{- if .Values.placementSeal.enabled -}}
- name: placement-seal
  secret: {secretName: {{ include "tmc.placementSealSecret" . }}}
{{- end -}}
{{- end -}}

{{/* The placement seal's keys mounted, read-only. */}}
{{- define "tmc.placementSealMount" -}}
{{- if .Values.placementSeal.enabled -}}
- {name: placement-seal, mountPath: {{ .Values.placementSeal.mountPath }}, readOnly: true}
{{- end -}}
{{- end -}}

{{/* admission.tenantNamespaceLabels as a flag: key=value pairs, keys sorted, comma-separated. */}}
{{- define "tmc.tenantNamespaceLabels" -}}
{{- $labels := .Values.admission.tenantNamespaceLabels -}}
{{- range $i, $k := keys $labels | sortAlpha }}{{ if $i }},{{ end }}{{ $k }}={{ get $labels $k }}{{ end -}}
{{- end -}}

{{/* "true" when the node DaemonSet runs tmc-dra-node (dra.nodePlugin): DRA and the agent on.
tmc-nri applies the claims it prepares, as the NRI plugin at container creation or, for a
runtime without NRI, `tmc-nri reconcile` to the running pods they are reserved for. */}}
{{- define "tmc.draNodePlugin" -}}
{{- if and .Values.dra.enabled .Values.dra.nodePlugin.enabled .Values.agent.enabled -}}
true
{{- end -}}
{{- end -}}

{{/* The node plugin's data directory on the host (and in its containers): its sockets and the
checkpoint tmc-nri reads. */}}
{{- define "tmc.draPluginDir" -}}
{{- printf "%s/plugins/tmc.dev" (trimSuffix "/" .Values.dra.nodePlugin.kubeletDir) -}}
{{- end -}}

{{/* The kubelet's plugin registry on the host, where tmc-dra-node registers. */}}
{{- define "tmc.draRegistryDir" -}}
{{- printf "%s/plugins_registry" (trimSuffix "/" .Values.dra.nodePlugin.kubeletDir) -}}
{{- end -}}
