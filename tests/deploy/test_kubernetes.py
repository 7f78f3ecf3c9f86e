"""The Kubernetes manifests: every kustomization renders with a real ``kubectl kustomize`` and every
object validates (Kubernetes kinds with kubernetes-validate, strictly, for the oldest and newest releases
pinned here; custom resources with custom_resources.py), and the objects hang together: probes and drain
timing, Service ports, selectors, S3 credentials, GPUs, and one recorded metric from the rule to the
adapter, the HPA and KEDA."""

from __future__ import annotations

import subprocess
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.custom_resources import SCHEMAS
from tests.support import ROOT

KUBERNETES = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = ["overlays/cpu", "overlays/gpu", "overlays/autoscaling", "overlays/keda", "kserve"]
VERSIONS = ["1.29.0", "1.35.0"]  # the oldest release cloud providers still support, and a current one

Objects = list[dict[str, Any]]


@pytest.fixture(scope="module")
def rendered(kubectl: str) -> dict[str, Objects]:
    result = {}
    for name in KUSTOMIZATIONS:
        completed = subprocess.run(
            [kubectl, "kustomize", str(KUBERNETES / name)], capture_output=True, text=True, timeout=120
        )
        assert completed.returncode == 0, f"{name}: {completed.stderr}"
        result[name] = [document for document in yaml.safe_load_all(completed.stdout) if document]
    return result


def one(objects: Objects, kind: str) -> dict[str, Any]:
    found = [item for item in objects if item["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def validate(item: dict[str, Any], version: str) -> None:
    schema = SCHEMAS.get((item["apiVersion"], item["kind"]))
    if schema is None:
        kubernetes_validate.validate(item, version, strict=True)
        return
    jsonschema.validate(item, schema)
    # The Kubernetes types inside custom resources, checked as Kubernetes checks them.
    metadata = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": item["metadata"]}
    kubernetes_validate.validate(metadata, version, strict=True)
    containers = item["spec"].get("containers")
    if containers:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "x"},
            "spec": {"containers": containers},
        }
        kubernetes_validate.validate(pod, version, strict=True)
    behavior = item["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    if behavior:
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "x"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "x"},
                "maxReplicas": 2,
                "behavior": behavior,
            },
        }
        kubernetes_validate.validate(hpa, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_kustomization_renders_valid_objects(
    rendered: dict[str, Objects], name: str, version: str
) -> None:
    assert rendered[name]
    for item in rendered[name]:
        validate(item, version)


def test_validation_is_strict() -> None:
    """A misplaced field fails, for Kubernetes kinds and custom resources alike."""
    deployment = yaml.safe_load((KUBERNETES / "base" / "deployment.yaml").read_text())
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)
    monitor = yaml.safe_load((KUBERNETES / "base" / "service-monitor.yaml").read_text())
    monitor["spec"]["endpoints"][0]["intervals"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor, VERSIONS[0])


def test_deployment_probes_health_and_drains_before_it_is_killed(rendered: dict[str, Objects]) -> None:
    deployment = one(rendered["overlays/cpu"], "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    exit_timeout = next(
        int(a.split("=")[1]) for a in container["args"] if a.startswith("--exit-timeout-secs=")
    )
    # Removal from the endpoints, then the drain, then unloading, all inside the grace period.
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + exit_timeout + 5
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounted = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert {"/var/cache/trt", "/tmp"} <= mounted  # what trt writes on a read-only root


def test_service_exposes_the_three_ports_with_grpc_named_for_http2(rendered: dict[str, Objects]) -> None:
    objects = rendered["overlays/cpu"]
    service, deployment = one(objects, "Service"), one(objects, "Deployment")
    ports = {port["name"]: port for port in service["spec"]["ports"]}
    assert {name: port["port"] for name, port in ports.items()} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 8002,
    }
    assert ports["grpc"]["appProtocol"] == "kubernetes.io/h2c"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    container_ports = {
        port["name"] for port in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert {port["targetPort"] for port in ports.values()} == container_ports


def test_disruption_budget_and_service_monitor_select_trt(rendered: dict[str, Objects]) -> None:
    objects = rendered["overlays/cpu"]
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one(objects, "Service")
    budget, monitor = one(objects, "PodDisruptionBudget"), one(objects, "ServiceMonitor")
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["spec"]["maxUnavailable"] == 1
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_repository_comes_from_s3_with_credentials_from_a_secret(rendered: dict[str, Objects]) -> None:
    objects = rendered["overlays/cpu"]
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--model-repository=$(TRT_MODEL_REPOSITORY)" in container["args"]
    config = one(objects, "ConfigMap")
    assert config["data"]["TRT_MODEL_REPOSITORY"].startswith("s3://")
    sources = {next(iter(source)): source[next(iter(source))]["name"] for source in container["envFrom"]}
    assert sources == {"configMapRef": config["metadata"]["name"], "secretRef": "trt-s3-credentials"}


def test_gpu_overlay_asks_for_gpus_and_the_gpu_image(rendered: dict[str, Objects]) -> None:
    pod = one(rendered["overlays/gpu"], "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "trt-serve:gpu"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert pod["securityContext"]["runAsUser"] == 1001  # Dockerfile.gpu's user
    assert one(rendered["overlays/cpu"], "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] == ("trt-serve:cpu")


def recording_rule() -> dict[str, Any]:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "trt-rules.yml").read_text())
    return rules["groups"][0]["rules"][0]


def test_one_recorded_metric_from_rule_to_adapter_to_hpa_and_keda(rendered: dict[str, Objects]) -> None:
    record = recording_rule()["record"]
    file_groups = yaml.safe_load((ROOT / "deploy" / "prometheus" / "trt-rules.yml").read_text())["groups"]
    for overlay in ("overlays/autoscaling", "overlays/keda"):
        assert one(rendered[overlay], "PrometheusRule")["spec"]["groups"] == file_groups
    adapter = yaml.safe_load((KUBERNETES / "prometheus-adapter" / "values.yaml").read_text())["rules"][
        "custom"
    ][0]
    assert adapter["seriesQuery"].startswith(record + "{")
    assert adapter["resources"]["overrides"] == {
        "namespace": {"resource": "namespace"},
        "pod": {"resource": "pod"},
    }
    hpa = one(rendered["overlays/autoscaling"], "HorizontalPodAutoscaler")
    metric = hpa["spec"]["metrics"][0]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == adapter["name"]["as"]
    assert (
        hpa["spec"]["scaleTargetRef"]["name"]
        == one(rendered["overlays/autoscaling"], "Deployment")["metadata"]["name"]
    )
    trigger = one(rendered["overlays/keda"], "ScaledObject")["spec"]["triggers"][0]
    assert record in trigger["metadata"]["query"] and trigger["metadata"]["query"].startswith("sum(")
    assert trigger["metadata"]["threshold"] == metric["pods"]["target"]["averageValue"]


def test_kserve_runtime_serves_triton_layout_models(rendered: dict[str, Objects]) -> None:
    runtime = one(rendered["kserve"], "ClusterServingRuntime")
    assert "triton" in {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert set(runtime["spec"]["protocolVersions"]) == {"v2", "grpc-v2"}
    container = runtime["spec"]["containers"][0]
    assert container["name"] == "kserve-container"  # the name KServe looks for
    assert container["args"][:2] == ["serve", "--model-repository=/mnt/models"]
    assert {"--http-port=8080", "--grpc-port=9000"} <= set(container["args"])
