{{/*
Names, labels, the image and the env every component shares.
*/}}

{{- define "gpucaas.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpucaas.fullname" -}}
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

{{/* "<fullname>-<component>"; call with (list $ "api"). */}}
{{- define "gpucaas.componentName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "gpucaas.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpucaas.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "gpucaas.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "gpucaas.labels" -}}
{{- $root := index . 0 -}}
{{ include "gpucaas.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: gpucaas
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpucaas.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret that holds the database URL. */}}
{{- define "gpucaas.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- include "gpucaas.componentName" (list . "database") -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret that holds the rate-limit storage URI ("" when none is set). */}}
{{- define "gpucaas.rateLimitSecret" -}}
{{- if .Values.api.rateLimitStorage.existingSecret -}}
{{- .Values.api.rateLimitStorage.existingSecret -}}
{{- else if .Values.api.rateLimitStorage.url -}}
{{- include "gpucaas.componentName" (list . "rate-limits") -}}
{{- end -}}
{{- end -}}

{{- define "gpucaas.peeringName" -}}
{{- default (include "gpucaas.componentName" (list . "controller")) .Values.controller.peering.name -}}
{{- end -}}

{{/* Secret with the API's in-pod TLS pair: the operator's, else the internal issuer's certificate. */}}
{{- define "gpucaas.apiTlsSecret" -}}
{{- if .Values.api.tls.existingSecret -}}
{{- .Values.api.tls.existingSecret -}}
{{- else -}}
{{- include "gpucaas.componentName" (list . "api-tls") -}}
{{- end -}}
{{- end -}}

{{/* Secret of the Ingress's TLS pair: the operator's, else the public issuer's certificate. */}}
{{- define "gpucaas.ingressTlsSecret" -}}
{{- default (include "gpucaas.componentName" (list . "api-public-tls")) .Values.api.ingress.tlsSecretName -}}
{{- end -}}

{{/* Secret with the admin token: the operator's, else the one the chart generates and keeps. */}}
{{- define "gpucaas.adminTokenSecret" -}}
{{- default (include "gpucaas.componentName" (list . "admin-token")) .Values.api.adminToken.existingSecret -}}
{{- end -}}

{{/* The internal issuer (cert-manager issuerRef) of the cluster-internal names. */}}
{{- define "gpucaas.internalIssuerRef" -}}
{{- if .Values.certManager.internalIssuer.create -}}
name: {{ include "gpucaas.componentName" (list . "ca") }}
kind: Issuer
group: cert-manager.io
{{- else -}}
{{- toYaml .Values.certManager.internalIssuer.issuerRef -}}
{{- end -}}
{{- end -}}

{{/* The API's scheme and the name its serving certificate carries for in-cluster clients. */}}
{{- define "gpucaas.apiServiceHost" -}}
{{- printf "%s.%s.svc" (include "gpucaas.componentName" (list . "api")) .Release.Namespace -}}
{{- end -}}

{{/* Log settings every component reads (core/logging.py: GPUCAAS_LOG_LEVEL, GPUCAAS_LOG_FORMAT). */}}
{{- define "gpucaas.commonEnv" -}}
- name: GPUCAAS_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: GPUCAAS_LOG_FORMAT
  value: {{ ternary "json" "text" .Values.logJson | quote }}
{{- end -}}

{{/* The node a pod runs on, as env var (name given). */}}
{{- define "gpucaas.nodeNameEnv" -}}
- name: {{ . }}
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end -}}

{{/* GPU node tolerations: the shared list plus a component's own. */}}
{{- define "gpucaas.gpuTolerations" -}}
{{- $root := index . 0 -}}
{{- $own := index . 1 -}}
{{- $all := concat ($root.Values.gpuNodes.tolerations | default list) ($own | default list) -}}
{{- with $all }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
checkov skips shared by every workload, each with its reason (checkov reads the
"checkov.io/skipN" annotations of the rendered object):
- CKV_K8S_15 (pull policy Always): images are pinned by tag or digest, so
  IfNotPresent fetches the same bytes without a registry round trip on every pod
  start (a GPU node's DaemonSet pods must come back even when the registry is down).
- CKV_K8S_43 (image by digest): image.digest pins by digest; the default tag is
  the chart's appVersion, an immutable release tag.
Component-specific skips (CKV_K8S_38 token automount, CKV_K8S_23/40 root,
CKV_K8S_35 secrets in env) sit on each workload with their own reason.
*/}}
{{- define "gpucaas.checkovCommonSkips" -}}
checkov.io/skip1: CKV_K8S_15=Pinned tag or digest; IfNotPresent keeps GPU nodes starting when the registry is down
checkov.io/skip2: CKV_K8S_43=image.digest pins by digest; the default tag is the immutable appVersion release tag
{{- end -}}

{{/* The common skips, and the probes' for a `helm test` pod: it runs one check to its end and
exits 0 or 1; a liveness probe could only restart it, a readiness probe has no Service to gate. */}}
{{- define "gpucaas.checkovTestPodSkips" -}}
{{ include "gpucaas.checkovCommonSkips" . }}
checkov.io/skip3: CKV_K8S_8=A helm test pod runs one check to its end; a liveness probe could only restart it
checkov.io/skip4: CKV_K8S_9=A helm test pod runs one check to its end; no Service waits on its readiness
{{- end -}}

{{/*
Whether the scheduler extender binds pods (its bindVerb). Only in allocation.mode
device-plugin: in dra mode kube-scheduler's DynamicResources plugin allocates the claim in
PreBind and the default binder binds; the extender only scores nodes (prioritize).
*/}}
{{/* Kueue's partition AdmissionCheck is on: queueing by Kueue, queueing.partitionCheck, and the
scheduler extender deployed to answer it (a check nobody answers holds every ClusterQueue). */}}
{{- define "gpucaas.partitionCheck" -}}
{{- if and (eq .Values.queueing.mode "kueue") .Values.queueing.partitionCheck .Values.schedulerExtender.enabled }}true{{ end -}}
{{- end }}

{{- define "gpucaas.extenderBinds" -}}
{{- if and .Values.schedulerExtender.bind (eq .Values.allocation.mode "device-plugin") }}true{{ end -}}
{{- end }}

{{/* The annotations that send private endpoints through the API's /v1/endpoint-auth: the
operator's (endpoints.authAnnotations), else the chart's Traefik Middlewares by their
cross-namespace names (<namespace>-<name>@kubernetescrd). */}}
{{- define "gpucaas.endpointAuthAnnotations" -}}
{{- if .Values.endpoints.authAnnotations -}}
{{- toJson .Values.endpoints.authAnnotations -}}
{{- else -}}
{{- $mw := include "gpucaas.componentName" (list . "endpoint") -}}
{{- $chain := printf "%s-%s-auth@kubernetescrd,%s-%s-strip@kubernetescrd" .Release.Namespace $mw .Release.Namespace $mw -}}
{{- dict "traefik.ingress.kubernetes.io/router.middlewares" $chain | toJson -}}
{{- end -}}
{{- end -}}

{{/* Hook annotations of a pre-install/pre-upgrade hook resource (the migration Job's); weight given. */}}
{{- define "gpucaas.migrationHook" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
