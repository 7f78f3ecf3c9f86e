"""Scale-out drill: N `trt serve` replicas reading one S3 repository, behind nginx, watched by Prometheus.

Every part is real and on 127.0.0.1: moto's S3 server, the replicas, nginx (HTTP `proxy_pass`, gRPC
`grpc_pass`), Prometheus evaluating deploy/prometheus/trt-rules.yml (the rule the HPA reads). It shows:

1. every replica serves the same models (read from the same bucket);
2. the autoscaling signal: under load on a model whose requests queue, the recorded average queue time
   per request rises, and the HPA's formula ceil(current x metric / target) (target from the HPA
   manifest, HPA's 10% tolerance) asks for more replicas;
3. a rolling restart under HTTP and gRPC load as a Deployment does it: the replica leaves the balancer,
   preStop waits, SIGTERM (trt stops accepting and finishes what it holds), a new one starts on its
   ports and is ready before the next goes; and the same with SIGTERM alone, to show what leaving the
   balancer first buys;
4. SIGKILL of a replica under load, with nginx's defaults (only the requests sent to that replica fail)
   and with the retry setting;
5. `trt perf` (HTTP and gRPC) and `trt analyze --url` pointed at the balanced URL.

Bounded: each phase has a duration and the clients a request cap. Needs nginx and prometheus (Debian
packages) and moto. Prints a table; writes reports/scale_out_drill.json.

    flock /tmp/trt-bench.lock python benchmarks/scale_out_drill.py [--replicas 3] [--signal-seconds 80]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "scale_out"))

from fleet import Balancer, ObjectStore, Prometheus, Replica  # noqa: E402
from load import Load, Outcome, failures  # noqa: E402

RECORD = "trt:queue_duration_us_per_request:rate1m"
console = Console()


def hpa_spec() -> dict[str, Any]:
    manifest = ROOT / "deploy" / "kubernetes" / "overlays" / "autoscaling" / "horizontal-pod-autoscaler.yaml"
    spec: dict[str, Any] = yaml.safe_load(manifest.read_text())["spec"]
    return spec


def hpa_desired(current: int, per_pod: list[float], target: float) -> int:
    """The HPA's rule for a Pods metric: ratio = average / target; inside 10% of 1 nothing changes."""
    if not per_pod:
        return current
    ratio = sum(per_pod) / len(per_pod) / target
    return current if abs(ratio - 1.0) <= 0.1 else math.ceil(current * ratio)


def bounded(desired: int, spec: dict[str, Any]) -> int:
    return int(min(max(desired, spec["minReplicas"]), spec["maxReplicas"]))


def served_models(replica: Replica) -> list[tuple[str, str, str]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{replica.http_port}/v2/repository/index", data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        rows = json.loads(reply.read())
    return sorted((row["name"], row.get("version", ""), row.get("state", "")) for row in rows)


def phase_same_models(replicas: list[Replica]) -> dict[str, Any]:
    models = {replica.name: served_models(replica) for replica in replicas}
    first = next(iter(models.values()))
    return {"models": first, "identical": all(rows == first for rows in models.values())}


def phase_signal(fleet: Fleet, seconds: float, clients: int) -> dict[str, Any]:
    spec = hpa_spec()
    target = float(spec["metrics"][0]["pods"]["target"]["averageValue"])
    query = f'{RECORD}{{namespace="drill"}}'
    deadline = time.monotonic() + 60
    while not (idle := fleet.prometheus.query(query)) and time.monotonic() < deadline:
        time.sleep(2)  # the rule needs two scrapes in its window and one evaluation (every 15 s)
    idle_values = [value for _, value in idle]
    timeline = [
        {
            "t_s": 0,
            "queue_us_per_request": _average(idle_values),
            "per_pod_us": [round(value) for value in idle_values],
            "hpa_formula": hpa_desired(len(fleet.replicas), idle_values, target),
            "desired_replicas": bounded(hpa_desired(len(fleet.replicas), idle_values, target), spec),
            "load": False,
        }
    ]
    started = time.monotonic()
    with Load(fleet.balancer.http_port, fleet.balancer.grpc_port, "slow", clients, 0) as load:
        while time.monotonic() - started < seconds:
            time.sleep(5)
            per_pod = [value for _, value in fleet.prometheus.query(query)]
            desired = hpa_desired(len(fleet.replicas), per_pod, target)
            timeline.append(
                {
                    "t_s": round(time.monotonic() - started),
                    "queue_us_per_request": _average(per_pod),
                    "per_pod_us": [round(value) for value in per_pod],
                    "hpa_formula": desired,
                    "desired_replicas": bounded(desired, spec),
                    "load": True,
                }
            )
    return {"target_us": target, "timeline": timeline, "requests": len(load.outcomes),
            "failed": len(failures(load.outcomes))}  # fmt: skip


def _average(values: list[float]) -> int | None:
    return round(sum(values) / len(values)) if values else None


def phase_rolling_restart(fleet: Fleet, kubernetes: bool, clients: tuple[int, int]) -> dict[str, Any]:
    """Replace one replica at a time under load; each new one (same ports, empty cache) is ready before
    the next goes. ``kubernetes``: as a Deployment's rolling update does it, the replica first leaves the
    balancer (its endpoint is removed; preStop waits 2 s), then gets SIGTERM; nginx passes requests whose
    connection failed to another replica. Otherwise: SIGTERM alone, nginx as configured by default."""
    fleet.balancer.reload(fleet.replicas, retry=kubernetes)
    drains = []
    ports = fleet.balancer.http_port, fleet.balancer.grpc_port
    with Load(*ports, "simple", *clients, keep_alive=not kubernetes) as load:
        time.sleep(3)
        for replica in fleet.replicas:
            if kubernetes:
                fleet.balancer.reload(fleet.replicas, retry=True, down=frozenset({replica.index}))
                time.sleep(2)
            drains.append(round(replica.terminate(), 2))
            replica.start()
            replica.wait_ready()
            if kubernetes:
                fleet.balancer.reload(fleet.replicas, retry=True)
            time.sleep(2)
        time.sleep(2)
    return summary(load.outcomes) | {"drain_s": drains}


def phase_kill(fleet: Fleet, retry: bool, clients: tuple[int, int]) -> dict[str, Any]:
    fleet.balancer.reload(fleet.replicas, retry)
    victim = fleet.replicas[0]
    with Load(fleet.balancer.http_port, fleet.balancer.grpc_port, "simple", *clients) as load:
        time.sleep(3)
        killed_at = time.monotonic()
        victim.kill()
        time.sleep(5)
    failed = failures(load.outcomes)
    victim_address = f"127.0.0.1:{victim.http_port}"
    http_failed = [o for o in failed if o.protocol == "http"]
    result = summary(load.outcomes) | {
        "in_flight_at_kill": sum(o.started <= killed_at <= o.ended for o in load.outcomes),
        "http_failed_in_flight_at_kill": sum(o.started <= killed_at for o in http_failed),
        # What nginx had sent to the victim, or sent on its dead keep-alive connections before marking it
        # failed: each HTTP failure names the replica that failed it.
        "http_failed": len(http_failed),
        "http_failed_on_victim": sum(o.upstream == victim_address for o in http_failed),
        "failures_end_ms_after_kill": round(max((o.ended - killed_at for o in failed), default=0) * 1000),
    }
    victim.start()
    victim.wait_ready()
    return result


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    failed = failures(outcomes)
    errors: dict[str, int] = {}
    for outcome in failed:
        errors[outcome.error[:90]] = errors.get(outcome.error[:90], 0) + 1
    return {
        "requests": len(outcomes),
        "http": sum(o.protocol == "http" for o in outcomes),
        "grpc": sum(o.protocol == "grpc" for o in outcomes),
        "failed": len(failed),
        "errors": errors,
    }


def phase_tools(fleet: Fleet, work: Path) -> dict[str, Any]:
    """trt perf and trt analyze, unchanged, at the balancer's URLs."""
    results: dict[str, Any] = {}
    for protocol, port in (("http", fleet.balancer.http_port), ("grpc", fleet.balancer.grpc_port)):
        completed = subprocess.run(
            [sys.executable, "-m", "trt", "perf", "-m", "simple", "-i", protocol, "-u", f"127.0.0.1:{port}",
             "--concurrency", "4", "-p", "1000", "-s", "25", "--allow-unstable", "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        entry: dict[str, Any] = {"exit": completed.returncode}
        if completed.returncode == 0:
            level = json.loads(completed.stdout)["results"][0]
            entry |= {
                "throughput": round(level["throughput"]),
                "p99_ms": round(level["latency_us"]["p99"] / 1000, 2),
            }
        else:
            entry["error"] = (completed.stderr or completed.stdout)[-400:]
        results[f"perf_{protocol}"] = entry
    completed = subprocess.run(
        [sys.executable, "-m", "trt", "analyze", "simple", "--url", f"127.0.0.1:{fleet.balancer.http_port}",
         "--max-duration", "60s", "--instances", "1", "--dynamic-batching", "off", "--concurrency", "1:2",
         "-p", "300", "--output-dir", str(work / "analyze"), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    results["analyze"] = {"exit": completed.returncode, "tail": (completed.stdout + completed.stderr)[-600:]}
    return results


class Fleet:
    def __init__(self, work: Path, count: int) -> None:
        self.store = ObjectStore(work)
        self.store.start()
        self.replicas = [Replica(index, work, self.store.endpoint) for index in range(count)]
        for replica in self.replicas:
            replica.start()
        for replica in self.replicas:
            replica.wait_ready()
        self.balancer = Balancer(work)
        self.balancer.start(self.replicas)
        self.prometheus = Prometheus(work)
        self.prometheus.start(self.replicas)

    def stop(self) -> None:
        self.prometheus.stop()
        self.balancer.stop()
        for replica in self.replicas:
            replica.terminate()
        self.store.stop()


def report(results: dict[str, Any]) -> None:
    table = Table(title=f"Scale-out drill: {results['replicas']} replicas behind nginx, one S3 repository")
    for column in ("phase", "requests (HTTP / gRPC)", "failed", "detail"):
        table.add_column(column)
    same = results["same_models"]
    table.add_row(
        "same models on every replica", "-", "-", f"{same['identical']}: {len(same['models'])} models"
    )
    signal = results["signal"]
    peak = max((row["queue_us_per_request"] or 0 for row in signal["timeline"]), default=0)
    asks = max((row["desired_replicas"] for row in signal["timeline"]), default=0)
    formula = max((row["hpa_formula"] for row in signal["timeline"]), default=0)
    idle = (signal["timeline"][0]["queue_us_per_request"] or 0) / 1000
    table.add_row(
        "autoscaling signal (slow model)", str(signal["requests"]), str(signal["failed"]),
        f"queue/request idle {idle:.1f} ms, under load "
        f"up to {peak / 1000:.1f} ms vs target {signal['target_us'] / 1000:.0f} ms: "
        f"HPA formula {formula}, asks {asks} (has {results['replicas']})",
    )  # fmt: skip
    for key, label in (
        ("rolling", "rolling restart as Kubernetes: leave the balancer, preStop, SIGTERM"),
        ("rolling_sigterm_only", "rolling restart, SIGTERM alone"),
    ):
        phase = results[key]
        table.add_row(label, f"{phase['requests']} ({phase['http']} / {phase['grpc']})", str(phase["failed"]),
                      f"drain s {phase['drain_s']}; {phase['errors'] or ''}")  # fmt: skip
    for key, label in (
        ("kill", "SIGKILL one replica, nginx default"),
        ("kill_retry", "SIGKILL, nginx retries"),
    ):
        kill = results[key]
        detail = (
            f"HTTP failures naming the killed replica {kill['http_failed_on_victim']}/{kill['http_failed']} "
            f"({kill['http_failed_in_flight_at_kill']} in flight at the kill, the rest sent to it before "
            f"nginx marked it down); last failure {kill['failures_end_ms_after_kill']} ms after the kill"
        )
        table.add_row(
            label, f"{kill['requests']} ({kill['http']} / {kill['grpc']})", str(kill["failed"]), detail
        )
    tools = results["tools"]
    for name in ("perf_http", "perf_grpc"):
        entry = tools[name]
        detail = (
            f"{entry.get('throughput')} infer/s, p99 {entry.get('p99_ms')} ms"
            if entry["exit"] == 0
            else entry["error"]
        )
        table.add_row(f"trt {name.replace('_', ' ')} via nginx", "-", str(entry["exit"]), detail)
    table.add_row(
        "trt analyze --url via nginx", "-", str(tools["analyze"]["exit"]), tools["analyze"]["tail"][-160:]
    )
    console.print(table)
    console.print("timeline of the autoscaling signal:", signal["timeline"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--signal-seconds", type=float, default=80.0)
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "scale_out_drill.json")
    args = parser.parse_args()
    clients = (6, 3)  # HTTP and gRPC clients during the restart and kill phases
    with tempfile.TemporaryDirectory(prefix="trt-drill-") as tmp:
        work = Path(tmp)
        console.print(f"starting moto, {args.replicas} replicas, nginx and Prometheus in {work}")
        fleet = Fleet(work, args.replicas)
        results: dict[str, Any] = {"replicas": args.replicas}
        try:
            results["same_models"] = phase_same_models(fleet.replicas)
            console.print("autoscaling signal ...")
            results["signal"] = phase_signal(fleet, args.signal_seconds, clients=4 * args.replicas)
            console.print("rolling restarts ...")
            results["rolling"] = phase_rolling_restart(fleet, kubernetes=True, clients=clients)
            results["rolling_sigterm_only"] = phase_rolling_restart(fleet, kubernetes=False, clients=clients)
            console.print("SIGKILL ...")
            results["kill"] = phase_kill(fleet, retry=False, clients=clients)
            results["kill_retry"] = phase_kill(fleet, retry=True, clients=clients)
            console.print("trt perf and trt analyze ...")
            results["tools"] = phase_tools(fleet, work)
        finally:
            fleet.stop()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    report(results)
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
