"""``analyze()``: from a model in a repository to an ``Outcome`` and its files in the output directory."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trt.analyzer.deployment import Deployment, ScratchServer
from trt.analyzer.errors import AnalyzeError
from trt.analyzer.generative import is_generative
from trt.analyzer.goals import Goals, Measurement
from trt.analyzer.precision import (
    PrecisionCheck,
    available_precisions,
    check_precisions,
    copy_model_file,
    served_by_config,
    unavailable_reason,
)
from trt.analyzer.report import (
    Outcome,
    recommendation_text,
    write_markdown,
    write_measurements,
    write_plots,
    write_recommendation,
    write_summary,
)
from trt.analyzer.search import Mode, closest, search
from trt.analyzer.session import (
    AnalysisSession,
    Checkpoint,
    MeasureSettings,
    effective_config,
    model_file_of,
    signature_of,
)
from trt.analyzer.space import Candidate, SearchSpace, SpaceLimits, build_space
from trt.protos import model_config_pb2
from trt.server.core.devices import cpu_count, gpu_count

logger = logging.getLogger("trt.analyze")


@dataclass(frozen=True)
class AnalyzeRequest:
    model: str
    repository: Path
    goals: Goals
    mode: Mode = Mode.QUICK
    limits: SpaceLimits = field(default_factory=SpaceLimits)
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    settings: MeasureSettings = field(default_factory=MeasureSettings)
    max_duration_s: float | None = None
    max_rel_error: float = 1e-2
    output_dir: Path | None = None
    url: str | None = None  # an existing server (HTTP host:port) instead of a scratch trt serve
    fresh: bool = False
    apply: bool = False

    @property
    def directory(self) -> Path:
        return self.output_dir or Path("reports") / self.model


class Observer:
    """Progress callbacks; the CLI shows them as a rich progress bar."""

    def planned(self, total: int | None, space: SearchSpace) -> None:
        pass

    def measured(self, candidate: Candidate, measurement: Measurement, cached: bool) -> None:
        pass

    def note(self, message: str) -> None:
        logger.info("%s", message)


def _prepare_scratch(
    request: AnalyzeRequest, server: ScratchServer, observer: Observer
) -> tuple[model_config_pb2.ModelConfig, Path | None, dict[str, PrecisionCheck], dict[str, str]]:
    model_dir = request.repository / request.model
    if not (model_dir / "config.pbtxt").exists() and not any(model_dir.glob("[1-9]*")):
        raise AnalyzeError(f"no model '{request.model}' in {request.repository}")
    server.add_model(request.model, model_dir)
    try:
        server.load(request.model)
    except AnalyzeError as exc:
        raise AnalyzeError(f"'{request.model}' does not load: {exc}") from None
    config = effective_config(server, request.model)
    if is_generative(config):
        raise AnalyzeError(
            f"'{request.model}' is a generative model (decoupled, text_input): tune it for output tokens/s "
            "with --target-ttft and/or --target-itl"
        )
    if config.platform == "ensemble":
        raise AnalyzeError(
            "ensembles are tuned through their composing models: run trt analyze on each step's model"
        )
    model_file = model_file_of(model_dir, config)
    platform = config.platform or config.backend
    wanted = request.limits.precisions or available_precisions(platform)
    usable = tuple(p for p in wanted if p in available_precisions(platform))
    checks: dict[str, PrecisionCheck] = {"fp32": PrecisionCheck("fp32", model_file, 0.0, True)}
    if model_file is not None and len(usable) > 1:
        observer.note(f"checking {', '.join(p for p in usable if p != 'fp32')} against fp32")
        checks = check_precisions(
            model_file, config, usable, request.directory / "variants", request.max_rel_error
        )
    for precision in wanted:
        if precision not in usable:
            checks[precision] = PrecisionCheck(
                precision, None, float("nan"), False, unavailable_reason(platform, precision)
            )
    names = {"fp32": request.model}
    for precision, check in checks.items():
        if served_by_config(platform, precision):
            names[precision] = request.model  # the FP32 file, with a setting in its config
            continue
        if precision == "fp32" or not check.accepted or check.path is None:
            continue
        names[precision] = f"{request.model}__{precision}"
        server.add_model(names[precision], model_dir, check.path)
    server.unload(request.model)
    return config, model_file, checks, names


def analyze(request: AnalyzeRequest, observer: Observer | None = None) -> Outcome:
    observer = observer or Observer()
    started = time.monotonic()
    directory = request.directory
    directory.mkdir(parents=True, exist_ok=True)
    deployment: Deployment
    if request.url:
        deployment = Deployment(request.url, request.url)
        config = effective_config(deployment, request.model)
        model_file = None
        checks = {"fp32": PrecisionCheck("fp32", None, 0.0, True)}
        names = {"fp32": request.model}
        observer.note("--url: candidates are loaded onto that server's model; precision stays as deployed")
    else:
        deployment = ScratchServer()
    try:
        if isinstance(deployment, ScratchServer):
            config, model_file, checks, names = _prepare_scratch(request, deployment, observer)
        accepted = tuple(p for p in names if p in checks and checks[p].accepted)
        space = build_space(config, cpu_count(), gpu_count(), request.limits, accepted)
        refused = [c for c in checks.values() if not c.accepted]
        if refused:
            space = _with_notes(space, [f"{c.precision} refused: {c.reason}" for c in refused])
        checkpoint = Checkpoint.open(
            directory / "checkpoint.json",
            signature_of(request.model, model_file, request.settings, request.url or "scratch"),
            request.fresh,
        )
        session = AnalysisSession(
            request.model,
            deployment,
            config,
            checks,
            request.settings,
            checkpoint,
            request.max_duration_s,
            names,
            observer.measured,
        )
        levels = sorted(set(request.concurrency))
        observer.planned(
            len(space.all()) * len(levels) if request.mode is Mode.BRUTE else None,
            space,
        )
        result = search(request.mode, session, space, request.goals, levels)
        chosen = result.best
        recommended = session.config_for(chosen.candidate) if chosen else None
        outcome = Outcome(
            model=request.model,
            mode=str(request.mode),
            goals=request.goals,
            space=space,
            result=result,
            chosen=chosen,
            closest=None if chosen else closest(request.goals, result.readings),
            precisions=checks,
            measurements_used=len(session.used),
            measured_now=session.measured_now,
            duration_s=time.monotonic() - started,
            config=recommended,
        )
    finally:
        if request.url:
            try:
                deployment.load(request.model)  # back to the config on the server's disk
            except AnalyzeError as exc:
                logger.warning("could not restore '%s' on %s: %s", request.model, request.url, exc)
        deployment.close()
    write_measurements(outcome, session.candidates, directory)
    write_summary(outcome, directory)
    write_recommendation(outcome, model_file, directory)
    plots = write_plots(outcome, directory)
    write_markdown(outcome, directory, plots)
    if request.apply and outcome.met:
        apply_recommendation(outcome, request.repository / request.model, model_file)
    return outcome


def _with_notes(space: SearchSpace, notes: list[str]) -> SearchSpace:
    from dataclasses import replace

    return replace(space, notes=(*space.notes, *notes))


def apply_recommendation(outcome: Outcome, model_dir: Path, model_file: Path | None) -> None:
    """Write the recommended config into the repository (the old one kept as ``config.pbtxt.orig``);
    a reduced-precision model file goes in as a new version so the FP32 file stays."""
    assert outcome.config is not None and outcome.chosen is not None
    config_path = model_dir / "config.pbtxt"
    if config_path.exists() and not (model_dir / "config.pbtxt.orig").exists():
        shutil.copyfile(config_path, model_dir / "config.pbtxt.orig")
    precision = outcome.chosen.candidate.precision
    variant = outcome.precisions[precision].path
    if variant is not None and model_file is not None and variant != model_file:
        versions = [
            int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isascii() and p.name.isdigit()
        ]
        new_version = model_dir / str(max(versions, default=0) + 1)
        new_version.mkdir()
        copy_model_file(variant, new_version / model_file.name)
    config_path.write_text(recommendation_text(outcome))


Progress = Callable[[Candidate, Measurement, bool], None]
