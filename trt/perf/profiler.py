"""The measurement loop: for each load level, warm up, then measure windows until perf_analyzer's
stability rule holds (or ``--max-trials``), and merge the last three windows into the level's result."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol as TypingProtocol

import psutil

from trt.perf import encoding
from trt.perf.control import ControlClient, open_control
from trt.perf.cuda_shared_memory import CudaShmRegions, create_cuda_regions, release_abandoned_cuda_regions
from trt.perf.errors import MeasurementError, OptionError
from trt.perf.input_data import InputData, load_input_data
from trt.perf.measurement import LevelResult, Window, summarize, window_from_parts
from trt.perf.model_info import ModelInfo
from trt.perf.options import LoadKind, MeasurementMode, PerfOptions, Protocol, SharedMemoryKind, TensorFormat
from trt.perf.results import ProfileReport
from trt.perf.schedule import ScheduleSpec
from trt.perf.server_stats import StatsSnapshot, breakdown
from trt.perf.shared_memory import SystemShmRegions, create_regions, release_abandoned_regions
from trt.perf.stability import STABILITY_WINDOWS, is_stable
from trt.perf.worker.plan import LoadAssignment, WorkerPlan
from trt.perf.worker.pool import WorkerPool
from trt.perf.worker.records import WindowPart

logger = logging.getLogger("trt.perf")

# perf_analyzer sleeps 1.2 x the measurement interval per time window; so do we, so figures compare.
WINDOW_STRETCH = 1.2
COUNT_POLL_S = 0.05


class Progress(TypingProtocol):
    def level_started(self, index: int, total: int, level: float) -> None: ...

    def window_done(self, level: float, trial: int, throughput: float, latency_us: float) -> None: ...

    def level_done(self, result: LevelResult) -> None: ...

    def warn(self, message: str) -> None: ...


class SilentProgress:
    def level_started(self, index: int, total: int, level: float) -> None:
        pass

    def window_done(self, level: float, trial: int, throughput: float, latency_us: float) -> None:
        pass

    def level_done(self, result: LevelResult) -> None:
        pass

    def warn(self, message: str) -> None:
        logger.warning("%s", message)


def worker_count(options: PerfOptions) -> int:
    """``--processes``, or one worker per four cores (at most 8), never more than the peak concurrency."""
    count = options.processes if options.processes > 0 else min(8, max(1, (os.cpu_count() or 1) // 4))
    if options.load is LoadKind.CONCURRENCY:
        count = min(count, max(options.concurrency))
    return max(1, count)


def _merge_parts(first: WindowPart, second: WindowPart) -> WindowPart:
    latencies = first.latencies_us
    latencies.extend(second.latencies_us)
    samples = first.error_samples + tuple(s for s in second.error_samples if s not in first.error_samples)
    return replace(
        second,
        latencies_us=latencies,
        errors=first.errors + second.errors,
        responses=first.responses + second.responses,
        send_ns=first.send_ns + second.send_ns,
        recv_ns=first.recv_ns + second.recv_ns,
        delayed=first.delayed + second.delayed,
        sequences_ended=first.sequences_ended + second.sequences_ended,
        error_samples=samples[:3],
    )


class Profiler:
    def __init__(self, options: PerfOptions, progress: Progress | None = None) -> None:
        self.options = options
        self.progress: Progress = progress or SilentProgress()
        self.warnings: list[str] = []
        self.server_stats = True

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
            self.progress.warn(message)

    # -- setup -------------------------------------------------------------------------------------

    def _formats(self, extensions: list[str]) -> tuple[TensorFormat, TensorFormat]:
        options = self.options
        if options.protocol is Protocol.GRPC:
            return TensorFormat.BINARY, TensorFormat.BINARY
        binary_ok = "binary_tensor_data" in extensions
        if options.input_format is None and not binary_ok:
            self._warn("the server does not list the binary_tensor_data extension: sending JSON tensors")
        fmt_in = options.input_format or (TensorFormat.BINARY if binary_ok else TensorFormat.JSON)
        fmt_out = options.output_format or (TensorFormat.BINARY if binary_ok else TensorFormat.JSON)
        return fmt_in, fmt_out

    def _requests(
        self,
        info: ModelInfo,
        data: InputData,
        fmt_in: TensorFormat,
        fmt_out: TensorFormat,
        shm: SystemShmRegions | CudaShmRegions | None,
    ) -> tuple[tuple[encoding.EncodedRequest, ...], ...]:
        streams = []
        for s, stream in enumerate(data.streams):
            encoded = []
            for r, request in enumerate(stream):
                slots = shm.input_slots[s][r] if shm else None
                outputs = shm.outputs if shm else None
                if self.options.protocol is Protocol.GRPC:
                    encoded.append(encoding.grpc_request(info, request, slots, outputs, info.decoupled))
                else:
                    encoded.append(
                        encoding.http_request(
                            info,
                            request,
                            fmt_in is TensorFormat.BINARY,
                            fmt_out is TensorFormat.BINARY,
                            slots,
                            outputs,
                        )
                    )
            streams.append(tuple(encoded))
        return tuple(streams)

    def _shared_memory(
        self, control: ControlClient, info: ModelInfo, data: InputData
    ) -> SystemShmRegions | CudaShmRegions:
        """The regions every request's inputs and outputs go through, after releasing killed runs'."""
        cuda = self.options.shared_memory is SharedMemoryKind.CUDA
        released = release_abandoned_cuda_regions(control) if cuda else release_abandoned_regions(control)
        if released:
            self._warn(
                f"released {len(released)} shared-memory region(s) that killed trt perf runs left "
                f"registered with the server: {', '.join(released)}"
            )
        create = create_cuda_regions if cuda else create_regions
        return create(control, info, data, self.options.output_shared_memory_size)

    def _check_model(self, info: ModelInfo, async_mode: bool) -> None:
        options = self.options
        if info.decoupled and not options.streaming:
            raise OptionError(f"model '{info.name}' is decoupled: measure it with -i grpc --streaming")
        if info.sequence and options.load is LoadKind.CONCURRENCY:
            peak = max(options.concurrency)
            if options.sequence.id_count < peak:
                raise OptionError(
                    f"--sequence-id-range holds {options.sequence.id_count} ids, "
                    f"fewer than concurrency {peak}"
                )
        if info.source == "metadata":
            self._warn(
                f"the server has no model-config call for '{info.name}': using its metadata "
                "(perf_analyzer refuses such servers)"
            )

    # -- measurement -------------------------------------------------------------------------------

    def _assignments(self, level: float, workers: int) -> list[LoadAssignment]:
        options = self.options
        if options.load is LoadKind.CONCURRENCY:
            concurrency = int(level)
            shares = [concurrency // workers + (i < concurrency % workers) for i in range(workers)]
            offsets = [sum(shares[:i]) for i in range(workers)]
            return [LoadAssignment(LoadKind.CONCURRENCY, s, o) for s, o in zip(shares, offsets, strict=True)]
        return [
            LoadAssignment(
                options.load,
                schedule=ScheduleSpec(
                    level if options.load is LoadKind.REQUEST_RATE else 0.0,
                    options.distribution,
                    options.request_intervals_us if options.load is LoadKind.CUSTOM_INTERVALS else (),
                    index,
                    workers,
                    options.seed,
                ),
            )
            for index in range(workers)
        ]

    def _window(self, pool: WorkerPool, previous: list[WindowPart]) -> list[WindowPart]:
        options = self.options
        if options.measurement_mode is MeasurementMode.TIME_WINDOWS:
            time.sleep(options.measurement_interval_ms / 1000 * WINDOW_STRETCH)
            return pool.flush()
        parts = pool.flush()
        deadline = time.monotonic() + max(60.0, options.request_timeout_s)
        while sum(len(p.latencies_us) for p in parts) < options.measurement_request_count:
            if time.monotonic() > deadline:
                break
            time.sleep(COUNT_POLL_S)
            parts = [_merge_parts(a, b) for a, b in zip(parts, pool.flush(), strict=True)]
        return parts

    def _measure_level(
        self, pool: WorkerPool, control: ControlClient, level: float, workers: int, async_mode: bool
    ) -> LevelResult:
        options = self.options
        pool.assign(self._assignments(level, workers))
        time.sleep(options.warmup_seconds)
        previous = pool.flush()
        snapshots: list[StatsSnapshot | None] = [self._stats(control)]
        psutil.cpu_percent(None)
        windows: list[Window] = []
        throughputs: list[float] = []
        latencies: list[float] = []
        stable = False
        for trial in range(1, options.max_trials + 1):
            parts = self._window(pool, previous)
            window = window_from_parts(previous, parts)
            previous = parts
            snapshot = self._stats(control)
            before = snapshots[-1]
            server = breakdown(before, snapshot) if before is not None and snapshot is not None else None
            window = replace(window, machine_percent=psutil.cpu_percent(None), server=server)
            snapshots.append(snapshot)
            windows.append(window)
            stats = summarize(
                level, [window], options.batch_size, options.percentile, None, False, 1, [window]
            )
            throughputs.append(stats.throughput)
            latencies.append(stats.stabilizing_latency_us if stats.request_count else float("nan"))
            self.progress.window_done(level, trial, throughputs[-1], latencies[-1])
            stable = is_stable(throughputs, latencies, options.stability_percentage)
            if stable:
                break
        if (
            not stable
            and async_mode
            and is_stable(throughputs, latencies, options.stability_percentage, False)
        ):
            self._warn(f"{self._level_label(level)}: latency is not stabilizing; try a lower load")
            stable = True
        recent = windows[-STABILITY_WINDOWS:]
        first, last = snapshots[-len(recent) - 1], snapshots[-1]
        server = breakdown(first, last) if first is not None and last is not None else None
        result = summarize(
            level, recent, options.batch_size, options.percentile, server, stable, len(windows), windows
        )
        if result.request_count == 0:
            samples = (
                "; ".join(s for w in windows for s in w.error_samples) or "no response within the windows"
            )
            raise MeasurementError(f"{self._level_label(level)}: no request succeeded ({samples})")
        self._check_result(result)
        return result

    def _stats(self, control: ControlClient) -> StatsSnapshot | None:
        if not self.server_stats:
            return None
        snapshot = control.statistics(self.options.model, self.options.model_version)
        if snapshot is None:
            self.server_stats = False
            self._warn("the server has no statistics extension: no server-side breakdown")
        return snapshot

    def _level_label(self, level: float) -> str:
        if self.options.load is LoadKind.CONCURRENCY:
            return f"concurrency {int(level)}"
        if self.options.load is LoadKind.REQUEST_RATE:
            return f"request rate {level:g}"
        return "custom intervals"

    def _check_result(self, result: LevelResult) -> None:
        label = self._level_label(result.level)
        if not result.stable:
            self._warn(
                f"Failed to obtain stable measurement within {result.trials} measurement windows for "
                f"{label}. Please try to increase the --measurement-interval."
            )
        if result.client.saturated:
            self._warn(
                f"{label}: the load generator is saturated (a worker used {result.client.busiest_worker:.0%} "
                "of a core): these figures measure the client, not the server; add --processes"
            )
        sent = result.request_count + result.error_count
        if self.options.load is not LoadKind.CONCURRENCY and sent and result.delayed_requests / sent > 0.01:
            self._warn(
                f"{label}: {result.delayed_requests / sent:.1%} of requests left late (no free connection or "
                "the generator fell behind): the server cannot sustain this rate, or add --processes"
            )
        if result.error_count:
            self._warn(
                f"{label}: {result.error_count} request(s) failed, e.g. {result.error_samples[0]}"
                if result.error_samples
                else f"{label}: {result.error_count} request(s) failed"
            )

    # -- run ---------------------------------------------------------------------------------------

    def run(self) -> ProfileReport:
        options = self.options
        started, clock = datetime.now(UTC), time.monotonic()
        workers = worker_count(options)
        self.server_stats = True
        pool = WorkerPool(workers)  # forked before any gRPC channel exists in this process
        control: ControlClient | None = None
        shm: SystemShmRegions | CudaShmRegions | None = None
        results: list[LevelResult] = []
        try:
            control = open_control(options)
            extensions = control.server_extensions()
            info = control.model_info(options.model, options.model_version)
            async_mode = options.async_mode if options.async_mode is not None else info.sequence
            self._check_model(info, async_mode)
            fmt_in, fmt_out = self._formats(extensions)
            data = load_input_data(
                info,
                options.input_data,
                dict(options.shapes),
                options.batch_size,
                options.string_length,
                options.string_data,
                options.seed,
            )
            if options.shared_memory is not SharedMemoryKind.NONE:
                shm = self._shared_memory(control, info, data)
            streams = self._requests(info, data, fmt_in, fmt_out, shm)
            host, port = options.endpoint
            plans = [
                WorkerPlan(
                    index=index,
                    count=workers,
                    protocol=options.protocol,
                    host=host,
                    port=port,
                    infer_path=encoding.infer_path(options.model, options.model_version),
                    streams=streams,
                    sequence=options.sequence if info.sequence else None,
                    lengths_from_data=data.from_files,
                    async_mode=async_mode,
                    streaming=options.streaming,
                    decoupled=info.decoupled,
                    timeout_s=options.request_timeout_s,
                    max_threads=options.max_threads,
                    http_headers=options.http_headers,
                    seed=options.seed,
                )
                for index in range(workers)
            ]
            pool.start(plans)
            levels = options.levels
            for index, level in enumerate(levels):
                self.progress.level_started(index, len(levels), level)
                result = self._measure_level(pool, control, level, workers, async_mode)
                results.append(result)
                self.progress.level_done(result)
                threshold = options.latency_threshold_ms
                if threshold and result.stabilizing_latency_us > threshold * 1000 and index + 1 < len(levels):
                    self._warn(
                        f"{self._level_label(level)} exceeded --latency-threshold {threshold:g} ms: "
                        "sweep stopped"
                    )
                    break
        finally:
            pool.stop()
            if shm is not None:
                with contextlib.suppress(Exception):
                    shm.close()
            if control is not None:
                control.close()
        return ProfileReport(
            model=options.model,
            model_version=options.model_version,
            url="{}:{}".format(*options.endpoint),
            protocol=options.protocol.value,
            mode=options.load,
            batch_size=options.batch_size,
            async_mode=async_mode,
            streaming=options.streaming,
            input_format=fmt_in.value,
            output_format=fmt_out.value,
            model_source=info.source,
            sequence_model=info.sequence,
            decoupled=info.decoupled,
            response_cache=info.response_cache,
            percentile=options.percentile,
            stability_percentage=options.stability_percentage,
            measurement_interval_ms=options.measurement_interval_ms,
            processes=workers,
            started_at=started.isoformat(timespec="seconds"),
            duration_s=round(time.monotonic() - clock, 2),
            results=tuple(results),
            warnings=tuple(self.warnings),
            server_stats=self.server_stats,
        )


def run_profile(options: PerfOptions, progress: Progress | None = None) -> ProfileReport:
    """Measure ``options.model`` at every level of ``options``; see ``PerfOptions``."""
    return Profiler(options, progress).run()
