"""JSON schemas for the custom resources the manifests use, which kubernetes-validate does not know.

Written from each project's API reference (Prometheus Operator monitoring.coreos.com/v1, KEDA
keda.sh/v1alpha1, KServe serving.kserve.io/v1alpha1) for the fields these manifests set, closed with
``additionalProperties: false`` so a misspelt or misplaced field fails. The parts that are Kubernetes
types (containers, HPA behavior) are checked by kubernetes-validate itself (see test_kubernetes.py).
"""

from __future__ import annotations

from typing import Any

_STRING = {"type": "string"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _STRING_MAP, "matchExpressions": {"type": "array"}},
}


def _closed(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": properties}


def _resource(spec: dict[str, Any]) -> dict[str, Any]:
    return _closed(
        ["apiVersion", "kind", "metadata", "spec"],
        apiVersion=_STRING, kind=_STRING, metadata={"type": "object"}, spec=spec,
    )  # fmt: skip


SERVICE_MONITOR = _resource(
    _closed(
        ["endpoints", "selector"],
        endpoints={
            "type": "array",
            "minItems": 1,
            "items": _closed(
                [],
                port=_STRING,
                targetPort={"type": ["string", "integer"]},
                path=_STRING,
                scheme={"enum": ["http", "https"]},
                interval=_DURATION,
                scrapeTimeout=_DURATION,
                honorLabels={"type": "boolean"},
                relabelings={"type": "array"},
                metricRelabelings={"type": "array"},
            ),
        },
        selector=_LABEL_SELECTOR,
        namespaceSelector=_closed(
            [], any={"type": "boolean"}, matchNames={"type": "array", "items": _STRING}
        ),
        jobLabel=_STRING,
        targetLabels={"type": "array", "items": _STRING},
        podTargetLabels={"type": "array", "items": _STRING},
    )
)

PROMETHEUS_RULE = _resource(
    _closed(
        ["groups"],
        groups={
            "type": "array",
            "items": _closed(
                ["name", "rules"],
                name=_STRING,
                interval=_DURATION,
                rules={
                    "type": "array",
                    "items": {
                        **_closed(
                            ["expr"],
                            record=_STRING,
                            alert=_STRING,
                            expr={"type": ["string", "integer"]},
                            labels=_STRING_MAP,
                            annotations=_STRING_MAP,
                            **{"for": _DURATION},
                        ),
                        "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
                    },
                },
            ),
        },
    )
)

SCALED_OBJECT = _resource(
    _closed(
        ["scaleTargetRef", "triggers"],
        scaleTargetRef=_closed(
            ["name"], apiVersion=_STRING, kind=_STRING, name=_STRING, envSourceContainerName=_STRING
        ),
        pollingInterval={"type": "integer"},
        cooldownPeriod={"type": "integer"},
        idleReplicaCount={"type": "integer"},
        minReplicaCount={"type": "integer"},
        maxReplicaCount={"type": "integer"},
        advanced=_closed(
            [],
            restoreToOriginalReplicaCount={"type": "boolean"},
            horizontalPodAutoscalerConfig=_closed([], name=_STRING, behavior={"type": "object"}),
        ),
        fallback=_closed(
            ["failureThreshold", "replicas"],
            failureThreshold={"type": "integer"},
            replicas={"type": "integer"},
        ),
        triggers={
            "type": "array",
            "minItems": 1,
            "items": _closed(
                ["type", "metadata"],
                type=_STRING,
                name=_STRING,
                metadata=_STRING_MAP,
                metricType={"enum": ["AverageValue", "Value", "Utilization"]},
                useCachedMetrics={"type": "boolean"},
                authenticationRef=_closed(["name"], name=_STRING, kind=_STRING),
            ),
        },
    )
)

CLUSTER_SERVING_RUNTIME = _resource(
    _closed(
        ["supportedModelFormats", "containers"],
        annotations=_STRING_MAP,
        labels=_STRING_MAP,
        disabled={"type": "boolean"},
        multiModel={"type": "boolean"},
        protocolVersions={"type": "array", "items": {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]}},
        supportedModelFormats={
            "type": "array",
            "minItems": 1,
            "items": _closed(
                ["name"],
                name=_STRING,
                version=_STRING,
                autoSelect={"type": "boolean"},
                priority={"type": "integer"},
            ),
        },
        containers={"type": "array", "minItems": 1, "items": {"type": "object"}},  # Kubernetes Containers
        nodeSelector=_STRING_MAP,
        tolerations={"type": "array"},
        volumes={"type": "array"},
    )
)

SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): CLUSTER_SERVING_RUNTIME,
}
