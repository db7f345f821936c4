"""The one GPU timing harness (``docs/cublaslt.md`` section 3).

* Inputs rotate through copies that total at least ``l2_factor`` x L2 (L2 read from the device), and never
  fewer than two, so no launch reads what the launch before it left in L2 (a weight larger than L2 keeps
  its tail there); inputs are random, never zeros.
* Every time is checked against the device's floor, measured on the device (bytes over its best copy or
  read bandwidth, flops over the best large GEMM torch runs): a time under it (by more than the floor's own
  measurement slack) is a harness error, reported, never a winner.
* Each candidate is captured once in a CUDA graph that calls it over every copy, repeated until the graph
  holds enough work to time with events (this also removes launch gaps for kernels under ~20 us).
  Screening many candidates skips the graph: one eager pass each, chunks of candidates queued behind a
  GPU spin that covers the host's enqueueing, one sync per chunk (``screen_batch``).
* Warm-up replays first; then samples, each one replay timed with events, divided by the calls in it.
* Comparisons interleave candidates round by round (A, B, C, B, C, A, ...) and report medians and spread.
* Outputs are poisoned with NaN before a candidate runs and checked afterwards, so a kernel that wrote
  nothing never passes; numerics compare against a higher-precision reference with per-dtype tolerances.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..kernels.torch_gemm import OperandSet, allocate, reference, result, set_bytes, torch_dtype
from ..problem import GemmProblem
from ..stats import Stats, round_order

# Relative Frobenius error allowed against the reference, by (dtype, compute type). FP8 operands are exact in
# the reference (it dequantizes them); what is left is the output's rounding and FP8 fast accumulation.
TOLERANCES = {
    ("bfloat16", "float32"): 1e-2,
    ("float16", "float32"): 2e-3,
    ("float32", "float32"): 1e-4,
    ("float32", "tf32"): 5e-3,
    ("float64", "float64"): 1e-10,
    ("float8_e4m3fn", "float32"): 2e-2,
    ("float8_e5m2", "float32"): 2e-2,
}
MAX_COPIES = 64
MIN_COPIES = 2
SPIN_CYCLES_PER_LAUNCH = 60_000  # ~30 us of GPU spin per queued launch: more than the host takes to issue one
MIN_SPIN_US = 500.0  # the shortest spin ahead of a screened chunk
MAX_SPIN_US = 100_000.0  # the longest: 16 configs x 65 launches are enqueued in ~10 ms
FLOOR_SLACK = 0.07  # how far under the measured floor a time may fall before it is called impossible


@dataclass(frozen=True)
class TimingSettings:
    l2_factor: float = 3.0
    min_graph_us: float = 2000.0  # work per replay, so event overhead stays under ~1%
    warmup_replays: int = 2
    warmup_ms: tuple[float, float] = (200.0, 1000.0)  # replays of all candidates before sampling: least, most
    warmup_settle: float = 0.01  # ... until the last turns' times agree within this (``warm_up``)
    rewarm_ms: tuple[float, float] = (50.0, 1000.0)  # the same before each later window of ``windowed_samples``
    rounds: int = 7
    seed: int = 0
    screen_passes: int = 3  # screen passes over the pool, alternating direction; a candidate's time is its median
    confirm: int = 4  # finalists within ``confirm_band`` of the best that a second, longer set of rounds re-judges
    confirm_band: float = 0.03
    windows: int = 3  # independent interleaved windows a verdict or a validation pools (``windowed_samples``)


class NumericsError(RuntimeError):
    pass


def l2_bytes(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).L2_cache_size


def copies_of(nbytes: int, l2: int, l2_factor: float) -> int:
    """Copies of ``nbytes`` that total ``l2_factor`` x L2, at least two whatever the size, at most ``MAX_COPIES``."""
    return max(MIN_COPIES, min(math.ceil(l2_factor * l2 / max(nbytes, 1)), MAX_COPIES))


def copies_needed(problem: GemmProblem, l2: int, l2_factor: float) -> int:
    """Copies of ``problem``'s operand set (``copies_of``)."""
    return copies_of(set_bytes(problem), l2, l2_factor)


def rotating_operands(problem: GemmProblem, device: torch.device, settings: TimingSettings) -> list[OperandSet]:
    """The operand copies calls rotate through (``copies_needed``)."""
    return allocate(problem, copies_needed(problem, l2_bytes(device), settings.l2_factor), device, settings.seed)


class BelowFloor(RuntimeError):
    """A measured time the device cannot deliver: the harness measured something else (e.g. an L2 hit)."""


@dataclass(frozen=True)
class DeviceLimits:
    """What the device was measured to sustain: bytes/s (best of copy and read) and flop/s per dtype."""

    bandwidth: float
    flops: dict

    def floor_us(self, problem: GemmProblem) -> float:
        """The least time one call can take: the operands touched once at the measured bandwidth, or its flops
        at the measured peak, whichever is longer."""
        peak = self.flops.get((problem.a_type, problem.compute_type), max(self.flops.values()))
        return problem.roofline_us(peak, self.bandwidth)

    def check(self, problem: GemmProblem, us: float, what: str) -> None:
        floor = self.floor_us(problem)
        if us < floor * (1 - FLOOR_SLACK):
            raise BelowFloor(
                f"{what}: {us:.2f} us is under the device's floor of {floor:.2f} us (measured "
                f"{self.bandwidth / 1e12:.2f} TB/s, peak flops of the dtype): the harness measured "
                "something other than this GEMM"
            )


LIMIT_DTYPES = (("bfloat16", "float32"), ("float16", "float32"))
FP8_LIMIT = ("float8_e4m3fn", "float32")  # measured too where the GPU has FP8 tensor cores (sm 8.9 and up)


def _best_us(fn, reps: int = 5) -> float:
    """The fastest of ``reps`` event-timed runs of ``fn`` after one warm-up."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return min(times)


def copy_and_read(device: torch.device, size: int = 1 << 30) -> tuple[float, float]:
    """Bytes/s of a device copy (bytes read and written) and of a reduction (bytes read) over ``size`` bytes."""
    src = torch.empty(size, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    copy_us = _best_us(lambda: dst.copy_(src))
    read_us = _best_us(lambda: src.view(torch.float32).sum())
    return 2 * size / copy_us * 1e6, size / read_us * 1e6


def bandwidth(device: torch.device, size: int = 1 << 30) -> float:
    """Bytes/s: the better of a copy (read + write) and a reduction (read) over ``size`` bytes."""
    return max(copy_and_read(device, size))


def measure_limits(device: torch.device, dtypes: tuple[tuple[str, str], ...] = LIMIT_DTYPES) -> DeviceLimits:
    """The device's bandwidth, and torch's best 8192^3 GEMM per (dtype, compute type) given, plus its best
    8192^3 e4m3 ``_scaled_mm`` where the GPU has FP8 tensor cores (the floor of FP8 problems)."""
    rate, flops, n = bandwidth(device), {}, 8192
    for dtype, compute in dtypes:
        x = torch.randn(n, n, device=device, dtype=torch_dtype(dtype))
        allow = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = compute == "tf32"
        try:
            flops[(dtype, compute)] = 2 * n**3 / _best_us(lambda x=x: torch.mm(x, x)) * 1e6
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allow
    if torch.cuda.get_device_capability(device) >= (8, 9):
        x = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        flops[FP8_LIMIT] = (
            2 * n**3 / _best_us(lambda: torch._scaled_mm(x, x.t(), one, one, out_dtype=torch.bfloat16)) * 1e6
        )
    return DeviceLimits(rate, flops)


class GraphTimer:
    """One candidate captured as a CUDA graph over all operand sets, timed by replay."""

    def __init__(
        self, launch: Callable[[OperandSet], None], sets: Sequence[OperandSet], settings: TimingSettings
    ) -> None:
        self.sets = sets
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            for ops in sets:  # one timed eager pass warms up (workspaces, kernel loading) and sizes the graph
                launch(ops)
            end.record()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        estimate_us = start.elapsed_time(end) * 1000.0 / len(sets)
        self.passes = max(1, math.ceil(settings.min_graph_us / max(estimate_us * len(sets), 1e-3)))
        self.calls = self.passes * len(sets)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            for _ in range(self.passes):
                for ops in sets:
                    launch(ops)
        for _ in range(settings.warmup_replays):
            self.graph.replay()
        torch.cuda.synchronize()

    def sample(self) -> float:
        """Microseconds per call of one replay."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / self.calls


def poison(sets: Sequence[OperandSet]) -> None:
    for ops in sets:
        ops.c.fill_(float("nan"))


def check_written(problem: GemmProblem, sets: Sequence[OperandSet]) -> None:
    """Every output was written (no NaN left from the poison); one device sync for all sets."""
    if torch.stack([torch.isnan(result(problem, ops)).any() for ops in sets]).any().item():
        raise NumericsError("output still holds the NaN poison: the kernel did not write it")


def relative_error(problem: GemmProblem, ops: OperandSet, ref: torch.Tensor | None = None) -> float:
    ref = reference(problem, ops) if ref is None else ref
    diff = result(problem, ops).to(ref.dtype) - ref
    return float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def tolerance_of(problem: GemmProblem) -> float:
    """The relative error allowed for ``problem``'s dtype and compute type (``TOLERANCES``, else 1e-2)."""
    return TOLERANCES.get((problem.a_type, problem.compute_type), 1e-2)


def check_numerics(
    problem: GemmProblem, launch: Callable[[OperandSet], None], ops: OperandSet, ref: torch.Tensor | None = None
) -> float:
    """Run once on a poisoned output and compare with the reference (``ref``, computed once per problem,
    or computed here); return the relative error, raise ``NumericsError`` beyond the dtype's tolerance."""
    poison([ops])
    launch(ops)
    torch.cuda.synchronize()
    check_written(problem, [ops])
    error = relative_error(problem, ops, ref)
    tolerance = tolerance_of(problem)
    if not error <= tolerance:
        raise NumericsError(f"relative error {error:.3g} exceeds {tolerance:g} for {problem.a_type}")
    return error


BEYOND_ALLOWED = 1e-3  # the fraction of elements a kernel of our own may have beyond the tolerance


def element_figures(problem: GemmProblem, ops: OperandSet, ref: torch.Tensor, error: float) -> dict:
    """A kernel of our own against the fp32 reference, element by element: each element's error relative to
    the larger of its reference and the reference's RMS (an element near zero is judged at the output's
    scale, not its own), the largest of them, the fraction beyond the dtype's tolerance, and ``error``, the
    norm-wise relative error the library's candidates are held to."""
    out = result(problem, ops).to(ref.dtype)
    scale = torch.linalg.vector_norm(ref) / max(ref.numel(), 1) ** 0.5
    errors = (out - ref).abs() / torch.maximum(ref.abs(), scale.clamp_min(1e-30))
    tolerance = tolerance_of(problem)
    return {
        "relative_error": error,
        "max_element_error": float(errors.max()),
        "beyond_fraction": float((errors > tolerance).float().mean()),
        "tolerance": tolerance,
        "reference": "float32" if ref.dtype == torch.float32 else str(ref.dtype).removeprefix("torch."),
    }


def check_elements(
    problem: GemmProblem, launch: Callable[[OperandSet], None], ops: OperandSet, ref: torch.Tensor
) -> dict:
    """``check_numerics`` and more, for a kernel outside the vendor library: its ``element_figures``; raise
    ``NumericsError`` with them where the norm-wise error exceeds the tolerance or more than ``BEYOND_ALLOWED``
    of the elements do."""
    figures = element_figures(problem, ops, ref, check_numerics(problem, launch, ops, ref))
    if figures["beyond_fraction"] > BEYOND_ALLOWED:
        raise NumericsError(
            f"{figures['beyond_fraction']:.3%} of the elements beyond {figures['tolerance']:g} "
            f"(largest element error {figures['max_element_error']:.3g}; at most {BEYOND_ALLOWED:.1%} allowed)"
        )
    return figures


def next_spin_us(host_us: float, spin_us: float) -> float:
    """The GPU spin ahead of the next screened chunk: 1.5x the host's enqueueing of this one, within
    ``MIN_SPIN_US``..``MAX_SPIN_US``. A host slower than the spin may have *waited* on it (a kernel's first
    load synchronises with the GPU), so its time then says how long the spin was, not how long enqueueing
    takes: the spin at most doubles per chunk. Sized from a blocked host, each spin was 1.5x the last and a
    cold process spun for minutes on one problem."""
    target = 1.5 * host_us if host_us < spin_us else min(1.5 * host_us, 2.0 * spin_us)
    return min(max(target, MIN_SPIN_US), MAX_SPIN_US)


def screen_batch(
    launchers: Sequence[Callable[[OperandSet], None]],
    sets: Sequence[OperandSet],
    deadline: float | None = None,
    chunk: int = 16,
) -> list[float | Exception | None]:
    """A quick time per launcher: one event-timed pass over ``sets`` each (after one untimed call that loads
    its kernel), ``chunk`` launchers enqueued back to back behind a GPU spin that covers the host's enqueueing
    (sized from the previous chunk's), one sync per chunk; thousands of configs cost little more than their
    kernels. Per launcher: microseconds per call, the exception its launch raised, or None where
    ``deadline`` (``time.monotonic``) passed first (the first chunk always runs). Outputs are not checked
    here: whoever is kept goes through ``check_numerics``."""
    out: list[float | Exception | None] = [None] * len(launchers)
    cycles = chunk * (len(sets) + 1) * SPIN_CYCLES_PER_LAUNCH  # first chunk: a generous guess, then measured
    for first in range(0, len(launchers), chunk):
        if first and deadline is not None and time.monotonic() > deadline:
            break
        spin = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spin[0].record()
        torch.cuda._sleep(cycles)
        spin[1].record()
        host, timed = time.perf_counter(), []
        for j in range(first, min(first + chunk, len(launchers))):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            try:
                launchers[j](sets[-1])
                start.record()
                for ops in sets:
                    launchers[j](ops)
                end.record()
                timed.append((j, start, end))
            except Exception as err:  # a config the library refuses at launch
                out[j] = err
        host_us = (time.perf_counter() - host) * 1e6
        torch.cuda.synchronize()
        for j, start, end in timed:
            out[j] = start.elapsed_time(end) * 1000.0 / len(sets)
        spin_us = max(spin[0].elapsed_time(spin[1]) * 1000.0, 1.0)
        cycles = int(cycles / spin_us * next_spin_us(host_us, spin_us))  # cycles per us: the spin's clock
    return out


def screen_passes(
    launchers: Sequence[Callable[[OperandSet], None]],
    sets: Sequence[OperandSet],
    passes: int,
    deadline: float | None = None,
) -> list[float | Exception | None]:
    """``screen_batch`` ``passes`` times, every other pass in reverse order (a candidate's neighbours in the
    queue, and its place in its chunk, change); per launcher the median of its passes, the exception a pass
    raised, or None where the deadline left it unscreened. One pass is one sample of a few microseconds'
    kernels: on the FP8 problems a single pass misranked configs 12% apart."""
    order = list(range(len(launchers)))
    per: list[list[float]] = [[] for _ in launchers]
    failed: dict[int, Exception | None] = {}
    for number in range(max(1, passes)):
        if number and deadline is not None and time.monotonic() > deadline:
            break
        this = order if number % 2 == 0 else order[::-1]
        live = [i for i in this if i not in failed]
        for i, outcome in zip(live, screen_batch([launchers[i] for i in live], sets, deadline), strict=True):
            if isinstance(outcome, float):
                per[i].append(outcome)
            elif not per[i]:
                failed[i] = outcome
    return [failed.get(i) if not per[i] else statistics.median(per[i]) for i in range(len(launchers))]


def warm_up(timers: Sequence[GraphTimer], settings: TimingSettings, turns: int = 4) -> float:
    """Replay ``timers`` in turn, one sync per turn, for at least ``warmup_ms[0]`` and until the last ``turns``
    turns took the same time within ``warmup_settle`` (the clocks settled), at most ``warmup_ms[1]``; return
    the milliseconds spent. A GPU that idled while the host built operands and graphs runs its first replays
    at other clocks. On the H100, three A/Bs of one decode GEMM pair without a warm-up spread by up to 12%,
    the first one off; with 200 ms of warm-up most spreads fell to 0.5-2%, but one window in ten still lands
    5-20% off whatever the warm-up, so a single A/B stays a noisy figure
    (docs/decisions.md, "Why windows, a warm-up, alternation and a rebuilt winner")."""
    least, most = (value / 1000.0 for value in settings.warmup_ms)
    start = time.perf_counter()
    recent: list[float] = []
    while True:
        turn = time.perf_counter()
        for timer in timers:
            timer.graph.replay()
        torch.cuda.synchronize()
        now = time.perf_counter()
        recent = [*recent[-(turns - 1) :], now - turn]
        spent = now - start
        settled = len(recent) == turns and max(recent) <= min(recent) * (1 + settings.warmup_settle)
        if spent >= most or (spent >= least and settled):
            return spent * 1000.0


def interleaved(
    problem: GemmProblem,
    launchers: dict[str, Callable[[OperandSet], None]],
    sets: Sequence[OperandSet],
    settings: TimingSettings,
    rounds: int | None = None,
    own_sets: dict[str, tuple[GemmProblem, Sequence[OperandSet]]] | None = None,
) -> dict[str, Stats]:
    """A/B(/C...) comparison: every round samples every candidate, in ``round_order``; medians per candidate.

    ``own_sets`` gives a candidate its own problem and operands (e.g. the padded variant of a problem)."""
    samples = interleaved_samples(problem, launchers, sets, settings, rounds, own_sets)
    return {name: Stats.of(values) for name, values in samples.items()}


def interleaved_samples(
    problem: GemmProblem,
    launchers: dict[str, Callable[[OperandSet], None]],
    sets: Sequence[OperandSet],
    settings: TimingSettings,
    rounds: int | None = None,
    own_sets: dict[str, tuple[GemmProblem, Sequence[OperandSet]]] | None = None,
) -> dict[str, list[float]]:
    """``interleaved``'s per-call times, round by round, per candidate."""
    own_sets = own_sets or {}
    timers = {}
    for name, fn in launchers.items():
        its_problem, its_sets = own_sets.get(name, (problem, sets))
        poison(its_sets)
        timers[name] = GraphTimer(fn, its_sets, settings)
        check_written(its_problem, its_sets)
    warm_up(list(timers.values()), settings)
    names = list(timers)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds or settings.rounds):
        for name in round_order(names, r):
            samples[name].append(timers[name].sample())
    return samples


WINDOW_SEED_STEP = 1000  # window w's operands are drawn with seed + w x this: no window repeats another's


def window_count(settings: TimingSettings) -> int:
    """How many windows ``windowed_samples`` pools under ``settings`` (at least one)."""
    return max(1, settings.windows)


def windowed_samples(
    problem: GemmProblem,
    launchers: dict[str, Callable[[OperandSet], None]],
    device: torch.device,
    settings: TimingSettings,
    rounds: int | None = None,
) -> dict[str, list[float]]:
    """``settings.windows`` interleaved comparisons, each on operand copies of its own (all held until the end,
    so no window reuses another's memory), their samples pooled per candidate (the i-th sample of every
    candidate comes from the same round). On the H100 about one window in ten lands 5-20% off the others (its
    clocks, or where its buffers fell; docs/decisions.md): the
    median of the pooled samples stays with the windows that agree. The first window warms up for
    ``warmup_ms``, each later one for ``rewarm_ms``, as long as its clocks take to settle: the GPU ran the window
    before it a moment ago, and the 150 ms saved on each of six windows of a verdict and its report take 1.5 s
    off every GEMM Bench crowns (``bench/README.md``, "Warm-up per window")."""
    pooled: dict[str, list[float]] = {name: [] for name in launchers}
    held = []
    for window in range(window_count(settings)):
        seed = settings.seed + WINDOW_SEED_STEP * window
        held.append(rotating_operands(problem, device, dataclasses.replace(settings, seed=seed)))
        its = dataclasses.replace(settings, warmup_ms=settings.rewarm_ms) if window else settings
        for name, values in interleaved_samples(problem, launchers, held[-1], its, rounds).items():
            pooled[name] += values
    return pooled


def device_info(device: torch.device) -> dict:
    props = torch.cuda.get_device_properties(device)
    return {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "l2_bytes": props.L2_cache_size,
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
