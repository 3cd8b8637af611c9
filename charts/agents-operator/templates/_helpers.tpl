{{/* Name of the chart's objects: the release name, plus the chart name unless the release name has it. */}}
{{- define "agents-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "agents-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The selector labels as k=v,k=v (the operator's --operator-pod-labels). */}}
{{- define "agents-operator.selectorLabelPairs" -}}
{{- $pairs := list -}}
{{- range $key, $value := (include "agents-operator.selectorLabels" . | fromYaml) -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{- define "agents-operator.labels" -}}
{{ include "agents-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "agents-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agents-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "agents-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "agents-operator.trainerImage" -}}
{{- default (printf "%s-trainer:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag)) .Values.trainerImage -}}
{{- end -}}

{{/* Watched namespaces, one per line (namespaced mode only). */}}
{{- define "agents-operator.namespaces" -}}
{{- range (default (list .Release.Namespace) .Values.watch.namespaces) }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .) }}
{{- fail (printf "watch.namespaces: %q is not a namespace name (Roles need exact names, no patterns)" .) }}
{{- end }}
{{ . }}
{{- end }}
{{- end -}}

{{/*
RBAC rules. "framework": what kopf itself needs. "application": what the AgentsJob controller needs.
Cluster-wide only: CRD discovery at run time (without it kopf scans resources once, at start-up).
*/}}
{{- define "agents-operator.frameworkRules" -}}
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if .Values.peering.enabled }}
- apiGroups: [kopf.dev]
  resources: [{{ if .Values.watch.allNamespaces }}clusterkopfpeerings{{ else }}kopfpeerings{{ end }}]
  verbs: [get, list, watch, patch]
{{- end }}
{{- if .Values.watch.allNamespaces }}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- end }}
{{- end -}}

{{- define "agents-operator.applicationRules" -}}
- apiGroups: [agents.dev]
  resources: [agentsjobs]
  verbs: [get, list, watch, delete]
- apiGroups: [agents.dev]
  resources: [agentsjobs/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [list]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch, create, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list, watch, create, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch, create, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, watch, create, delete]
{{- end -}}
