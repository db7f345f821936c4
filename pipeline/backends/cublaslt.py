"""NVIDIA backend: search cuBLASLt algorithms through ``nvmath.bindings.cublasLt`` (the ``cuda`` extra).

Candidates for one problem (``docs/cublaslt.md`` sections 1.6, 1.7 and 7): torch's own
default call (the baseline, and a candidate); the cuBLASLt heuristic list requested at
``heuristic_count`` (nvmath's ``Matmul`` stops at 8); a local search around it, the ``neighbours`` nearest
valid configs one axis away from each heuristic result (tile, stages, split-K and reduction, swizzle,
custom option, cluster shape); and, with ``enumerate_budget``, configs drawn at random from the whole space.
Each config passes ``cublasLtMatmulAlgoCheck`` with the runtime's workspace. Every candidate is screened
in batches (a time under the device's measured floor is a harness error, never a candidate); the best few
of every prefix tier of the pool (``selection``; the heuristic's list is one) are re-measured against the
default, interleaved, on fresh operand buffers; a winner must beat the default by ``margin`` or the answer
is ``Default``. The config space itself (records, names, axes, draws, neighbours) is ``cublaslt_algo``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from ..kernels import triton_gemm
from ..kernels.cublaslt_algo import read_config
from ..kernels.lt_gemm import LtGemm, lt, record_from_config
from ..kernels.torch_gemm import OperandSet, reference, torch_launcher
from ..kernels.triton_cache import cache_dir as triton_cache_dir
from ..kernels.triton_cache import device_key
from ..problem import GemmProblem
from ..stats import Verdict, crowned
from . import selection
from .base import DEFAULT, BackendBase, CandidateResult, ProblemResult, TuneSettings, WinnerRecord
from .measure import (
    BelowFloor,
    DeviceLimits,
    NumericsError,
    TimingSettings,
    check_elements,
    check_numerics,
    device_info,
    interleaved,
    measure_limits,
    rotating_operands,
    screen_passes,
    window_count,
    windowed_samples,
)
from .pool import Pool, add_triton, compile_triton, own_launcher, pool_of
from .verdict_child import VerdictChild, VerdictChildError, request_of

VERDICT_PAIR = ("default", "winner")  # the two a verdict times, as its samples name them
# operand seeds (over ``TimingSettings.seed``) of the reading that decides a winner and of the one Bench reports:
# screening and judging used 0 to 2; a report that is the deciding reading repeats its luck (``_decide``)
VERDICT_SEED, REPORT_SEED = 3, 4


def checked(
    problem: GemmProblem, launch: Callable[[OperandSet], None], ops: OperandSet, ref: torch.Tensor, own: bool
) -> tuple[float, dict | None]:
    """The norm-wise error of a candidate against the reference and, for a kernel of this project's
    (``own``), its element figures (``measure.check_elements``); raises ``NumericsError`` beyond tolerance."""
    if not own:
        return check_numerics(problem, launch, ops, ref), None
    figures = check_elements(problem, launch, ops, ref)
    return figures["relative_error"], figures


class CublasLtBackend(BackendBase):
    """The ``Backend`` for NVIDIA GPUs."""

    name = "cublaslt"

    def __init__(
        self,
        device: int = 0,
        timing: TimingSettings | None = None,
        triton_cache: str | None = None,
        verdict_process: bool = True,
    ) -> None:
        """``verdict_process``: time verdicts and re-timings in a child that never searches (``verdict_child``),
        started by ``prepare()`` or the first verdict; False times them in this process."""
        self.device = torch.device("cuda", device)
        torch.cuda.set_device(self.device)
        self.timing = timing or TimingSettings()
        self.handle = lt.create()
        self._limits: DeviceLimits | None = None
        self.triton = triton_cache is not None  # --triton: this project's Triton kernels join the pool
        self.sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.verdicts = VerdictChild.for_gpu(self.device.index) if verdict_process else None
        if self.triton:
            os.environ["TRITON_CACHE_DIR"] = str(triton_cache_dir(Path(triton_cache), self.triton_key()))

    def triton_key(self) -> dict:
        """What the Triton compile cache and a Triton row hold for (``triton_cache.device_key``)."""
        return device_key(self.device.index)

    @property
    def limits(self) -> DeviceLimits:
        """The device's measured bandwidth and peak (about a second, once per backend)."""
        if self._limits is None:
            self._limits = measure_limits(self.device)
        return self._limits

    def prepare(self) -> None:
        """Measure the device's limits now rather than inside the first problem's tuning time, then start the
        verdict process (its start-up overlaps the first search)."""
        _ = self.limits
        if self.verdicts is not None:
            self.verdicts.start()

    def close(self) -> None:
        """Stop the verdict process."""
        if self.verdicts is not None:
            self.verdicts.close()

    def runtime(self) -> dict:
        """What the results are valid for: device, torch (TunableOp's PT_VERSION) and cuBLASLt versions."""
        return {
            **device_info(self.device),
            "pt_version": torch.__version__.split("+")[0],
            "cublaslt_version": lt.get_version(),
            **({"triton": self.triton_key()} if self.triton else {}),
        }

    def pool(self, problem: GemmProblem, gemm: LtGemm, settings: TuneSettings) -> Pool:
        """The default, the heuristic's list, then its valid neighbours and ``enumerate_budget`` random configs."""
        start = time.monotonic()
        heuristic = gemm.heuristic(settings.heuristic_count)
        more = gemm.space.neighbours(heuristic, settings.neighbours) + gemm.space.enumerate(settings.enumerate_budget)
        pool = pool_of(problem, gemm, heuristic, more, start)
        if self.triton:
            add_triton(pool, problem, self.sms)
        pool.build_s = time.monotonic() - start
        return pool

    def screen(
        self, problem: GemmProblem, pool: Pool, sets: list[OperandSet], deadline: float | None = None
    ) -> dict[str, CandidateResult]:
        """Every candidate of ``pool`` by name, screened in batches (``screen_us``) or with the reason it was not:
        the time budget spent, the library's refusal, or a time under the device's floor (a harness error)."""
        candidates = {n: CandidateResult(n, config=pool.configs[n]) for n in pool.names}
        screened = screen_passes([pool.launchers[n] for n in pool.names], sets, self.timing.screen_passes, deadline)
        for name, outcome in zip(pool.names, screened, strict=True):
            if outcome is None:
                candidates[name].error = "not screened: time budget spent"
            elif isinstance(outcome, Exception):
                candidates[name].error = f"{type(outcome).__name__}: {outcome}"
            else:
                try:
                    self.limits.check(problem, outcome, f"{name} screened")
                    candidates[name].screen_us = outcome
                except BelowFloor as err:
                    candidates[name].error = f"{type(err).__name__}: {err}"
        return candidates

    def tune_one(self, problem: GemmProblem, settings: TuneSettings) -> ProblemResult:
        """Screen the pool in batches within the time budget, re-measure the tier finalists against the default
        on fresh buffers (``ScaleModeUnsupported`` where this cuBLASLt cannot express the problem's scales)."""
        with self._prepared(problem, settings) as (gemm, sets):
            pool, ref = self.pool(problem, gemm, settings), reference(problem, sets[0])
            result = ProblemResult(problem, phases={"pool_s": pool.build_s})
            if self.triton:
                result.phases["triton_compile_s"] = compile_triton(pool, sets[0])
            start = time.monotonic()
            candidates = self.screen(problem, pool, sets, time.monotonic() + settings.time_budget_s)
            result.candidates = list(candidates.values())
            if pool.not_served:
                error = triton_gemm.NOT_SERVED + pool.not_served
                result.candidates.append(CandidateResult(triton_gemm.SOURCE, error=error))
            if candidates[DEFAULT].screen_us is None:
                raise RuntimeError(f"torch's default path failed: {candidates[DEFAULT].error}")
            screened = [None, *(candidates[n].screen_us for n in pool.names[1:])]
            per_tier = max(1, settings.finalists // 2)
            chosen = selection.finalists(
                screened[: pool.triton_start], per_tier, (pool.heuristic_end, *selection.TIERS)
            )
            if pool.triton_start is not None:  # the best of the Triton configs meet the library's best
                own = selection.finalists(screened[pool.triton_start :], per_tier, ())
                chosen = sorted([*chosen, *(pool.triton_start + i for i in own)], key=lambda i: screened[i])
            finalists = self.numerically_sound(
                problem, pool, [candidates[pool.names[i]] for i in chosen], sets, ref, len(chosen)
            )
            result.phases["screen_s"] = time.monotonic() - start
            self._decide(problem, result, pool, finalists, sets, ref, settings, self.timing.rounds)
            return result

    def exhaustive_one(self, problem: GemmProblem, settings: TuneSettings) -> ProblemResult:
        """The reference search: every candidate of the pool measured with full rigor (interleaved rounds),
        then its best few confirmed against the default as ``tune_one`` confirms its finalists."""
        with self._prepared(problem, settings) as (gemm, sets):
            pool, ref = self.pool(problem, gemm, settings), reference(problem, sets[0])
            result = ProblemResult(problem, phases={"pool_s": pool.build_s})
            start = time.monotonic()
            candidates = [CandidateResult(n, config=pool.configs[n]) for n in pool.names if n != DEFAULT]
            result.candidates = candidates
            sound = self.numerically_sound(problem, pool, candidates, sets, ref, len(candidates))
            measured = interleaved(problem, {c.name: pool.launchers[c.name] for c in sound}, sets, self.timing)
            for candidate in sound:
                candidate.screen_us = measured[candidate.name].median
            ranked = sorted(sound, key=lambda c: c.screen_us)[: settings.finalists]
            result.phases["screen_s"] = time.monotonic() - start
            self._decide(problem, result, pool, ranked, sets, ref, settings, self.timing.rounds)
            return result

    def retime(self, previous: ProblemResult, settings: TuneSettings, report: bool = True) -> ProblemResult:
        """The previous winner, rebuilt from its config under this cuBLASLt (an error where it no longer
        passes cublasLtMatmulAlgoCheck) or, a Triton config, compiled under this Triton, checked here, judged
        against torch's default as a verdict is (``_verdict``) and, where it still wins and ``report`` asks,
        reported from a second reading as ``_decide`` reports a winner (without it: from the verdict)."""
        problem, name = previous.problem, previous.winner
        with self._prepared(problem, settings) as (gemm, sets):
            solution = previous.record.solution if previous.record else {}
            ref = reference(problem, sets[0])
            winner = own_launcher(problem, solution)
            if winner is None:
                record = record_from_config(gemm, solution)
                config = {**solution, "AlgoBytes": read_config(record)["AlgoBytes"]}
                winner = gemm.launcher(record)
            else:
                config = dict(solution)
            numerics = {DEFAULT: check_numerics(problem, torch_launcher(problem), sets[0], ref)}
            numerics[name], figures = checked(problem, winner, sets[0], ref, triton_gemm.is_config(solution))
            if figures is not None:
                config["numerics"] = figures
            verdict, reading = self._readings(
                problem, solution, name, settings.workspace_bytes, settings.margin, report
            )
            result = ProblemResult(
                problem,
                default_us=reading.default_us,
                winner_us=reading.default_us,
                numerics={DEFAULT: numerics[DEFAULT]},
                candidates=[
                    CandidateResult(
                        name, final_us=verdict.winner_us, verdict_us=verdict.winner_us, config=config,
                        verdict_low=verdict.low, verdict_speedup=verdict.speedup,
                    )
                ],
            )  # fmt: skip
            if crowned(verdict, reading, settings.margin):
                result.crown(name, reading.winner_us, WinnerRecord(config))
                result.candidates[0].report_windows = [list(window) for window in reading.windows]
                result.numerics[name] = numerics[name]
            elif verdict.wins(settings.margin):  # a harness error: searched again (base.tune)
                raise BelowFloor(f"{name}: the reported reading fell under the device's floor")
            return result

    @contextlib.contextmanager
    def _prepared(self, problem: GemmProblem, settings: TuneSettings) -> Iterator[tuple[LtGemm, list[OperandSet]]]:
        workspace = torch.empty(settings.workspace_bytes, dtype=torch.uint8, device=self.device)
        gemm = LtGemm(problem, self.handle, workspace)
        try:
            yield gemm, rotating_operands(problem, self.device, self.timing)
        finally:
            gemm.close()

    @staticmethod
    def numerically_sound(
        problem: GemmProblem,
        pool: Pool,
        ranked: list[CandidateResult],
        sets: list[OperandSet],
        ref: torch.Tensor,
        count: int,
    ) -> list[CandidateResult]:
        """The first ``count`` candidates of ``ranked`` whose output matches the reference."""
        sound = []
        for candidate in ranked:
            if len(sound) >= count:
                break
            try:
                checked(problem, pool.launchers[candidate.name], sets[0], ref, pool.own_kernel(candidate.name))
                sound.append(candidate)
            except (NumericsError, lt.cuBLASLtError, RuntimeError) as err:
                candidate.error = f"{type(err).__name__}: {err}"
        return sound

    def _decide(
        self,
        problem: GemmProblem,
        result: ProblemResult,
        pool: Pool,
        finalists: list[CandidateResult],
        sets: list[OperandSet],
        ref: torch.Tensor,
        settings: TuneSettings,
        rounds: int,
    ) -> None:
        """Interleave the default and the finalists; those within ``confirm_band`` of the best are judged again
        with the default in twice the rounds on other fresh buffers (the winner of many near-equal medians is
        the luckiest as often as the fastest). The fastest there is re-timed alone against the default on a
        third fresh set (the verdict, ``_verdict``: in a process that never searched, in as many windows as
        Validate pools): the best of several noisy medians is optimistic, so the ``margin`` it must beat is
        judged on a measurement that did not choose it. A winner is crowned with the figure of a fourth reading
        on a fourth set: the verdict crowns only where it read at least the margin, so a row whose true speedup
        is near the margin is crowned on its high draws, and its verdict's figure reads high (H100: rows Bench
        named at x1.02-1.06 validated 0.9-2.6% lower, ``bench/README.md``, "Does Bench predict what ships?")."""
        start = time.monotonic()
        default_us = self._judge(problem, pool, finalists, rounds, 1)
        ranked = sorted(finalists, key=lambda c: c.final_us)
        promising = bool(ranked) and default_us / ranked[0].final_us >= 1 + settings.margin / 2
        close = (
            [
                c
                for c in ranked[: self.timing.confirm]
                if c.final_us <= ranked[0].final_us * (1 + self.timing.confirm_band)
            ]
            if promising
            else []
        )
        if close:
            default_us = self._judge(problem, pool, close, 2 * rounds, 2)
        result.default_us = default_us
        best = min(close or finalists, key=lambda c: c.final_us, default=None)
        result.winner_us = result.default_us
        if best is not None and result.default_us / best.final_us >= 1 + settings.margin:
            config, workspace = pool.configs[best.name], settings.workspace_bytes
            try:
                verdict, report = self._readings(problem, config, best.name, workspace, settings.margin)
            except VerdictChildError as err:  # refused (or the process died): not crowned, the run goes on
                best.error = f"{type(err).__name__}: {err}"
                verdict = report = Verdict(result.default_us, math.inf, 0.0)
            best.verdict_us, best.verdict_low, best.verdict_speedup = verdict.winner_us, verdict.low, verdict.speedup
            result.default_us = result.winner_us = report.default_us
            if crowned(verdict, report, settings.margin):
                launch, own = pool.launchers[best.name], pool.own_kernel(best.name)
                result.numerics[best.name], figures = checked(problem, launch, sets[0], ref, own)
                config = best.config if figures is None else {**best.config, "numerics": figures}  # docs/triton.md
                result.crown(best.name, report.winner_us, WinnerRecord(config))
                best.report_windows = [list(window) for window in report.windows]
            elif verdict.wins(settings.margin):
                best.error = f"the reported reading fell under the device's floor (verdict x{verdict.speedup:.3f})"
        for candidate in result.candidates:
            if candidate.name == DEFAULT:
                candidate.final_us = result.default_us
        result.numerics[DEFAULT] = check_numerics(problem, pool.launchers[DEFAULT], sets[0], ref)
        result.phases["final_s"] = time.monotonic() - start

    def _judge(
        self, problem: GemmProblem, pool: Pool, candidates: list[CandidateResult], rounds: int, seed_offset: int
    ) -> float:
        """Interleaved rounds of the default and ``candidates`` on operand buffers of their own (seed +
        ``seed_offset``: screened on one set, judged on others, no winner's curse from lucky buffers); sets
        each candidate's ``final_us``, drops (with the error) those under the device's floor, returns the
        default's median."""
        fresh = rotating_operands(
            problem, self.device, dataclasses.replace(self.timing, seed=self.timing.seed + seed_offset)
        )
        names = [DEFAULT, *(c.name for c in candidates)]
        final = interleaved(problem, {n: pool.launchers[n] for n in names}, fresh, self.timing, rounds=rounds)
        del fresh
        self.limits.check(problem, final[DEFAULT].median, "torch's default")
        for candidate in list(candidates):
            candidate.final_us = final[candidate.name].median
            try:
                self.limits.check(problem, candidate.final_us, candidate.name)
            except BelowFloor as err:
                candidate.error = f"{type(err).__name__}: {err}"
                candidates.remove(candidate)
        return final[DEFAULT].median

    def _readings(
        self, problem: GemmProblem, config: dict, name: str, workspace_bytes: int, margin: float, report: bool = True
    ) -> tuple[Verdict, Verdict]:
        """The verdict that decides ``name`` and the reading Bench reports for it: where the verdict wins by
        ``margin`` and ``report`` asks, a second one on operands no other reading used (``_decide`` says why);
        else the verdict."""
        verdict = self._verdict(problem, config, name, workspace_bytes, VERDICT_SEED)
        if not report or not verdict.wins(margin):
            return verdict, verdict
        return verdict, self._verdict(problem, config, name, workspace_bytes, REPORT_SEED)

    def _verdict(
        self, problem: GemmProblem, config: dict, name: str, workspace_bytes: int, seed_offset: int
    ) -> Verdict:
        """``name`` (``config``) against the default from interleaved rounds of the two alone (``verdict_samples``:
        in the verdict process, on operand buffers no earlier reading used, seed + ``seed_offset``), in twice
        ``windows`` windows of ``rounds`` rounds: as many as Validate pools over a row's two pairs. Where each
        window's buffers land moves a decode GEMM's speedup by about 1% (sd) on the H100, more than its rounds
        do, so windows, not rounds, are what make the figure repeat (``bench/README.md``, "Does Bench predict
        what ships?"). ``name``'s time is infinite where it falls under the device's floor."""
        timing = dataclasses.replace(self.timing, seed=self.timing.seed + seed_offset, windows=2 * self.timing.windows)
        samples = self.verdict_samples(problem, config, timing, self.timing.rounds, workspace_bytes)
        verdict = Verdict.of(samples, *VERDICT_PAIR, windows=window_count(timing))
        self.limits.check(problem, verdict.default_us, "torch's default")
        try:
            self.limits.check(problem, verdict.winner_us, name)
        except BelowFloor:
            return dataclasses.replace(verdict, winner_us=math.inf, low=0.0)
        return verdict

    def verdict_samples(
        self, problem: GemmProblem, config: dict, timing: TimingSettings, rounds: int, workspace_bytes: int
    ) -> dict[str, list[float]]:
        """``time_verdict``'s samples, timed in the verdict process where this backend has one
        (``VerdictChildError`` where it could not time them)."""
        if self.verdicts is None:
            return self.time_verdict(problem, config, timing, rounds, workspace_bytes)
        return self.verdicts.ask(request_of(problem, config, timing, rounds, workspace_bytes))["samples"]

    def time_verdict(
        self, problem: GemmProblem, config: dict, timing: TimingSettings, rounds: int, workspace_bytes: int
    ) -> dict[str, list[float]]:
        """Per-call µs of torch's default and ``config`` (``VERDICT_PAIR``) from the same rounds, in
        ``windowed_samples`` windows. ``config`` runs as Validate and the runtime run it: rebuilt from its saved
        form on a workspace of its own, not the launcher screening used (the pool's read up to 4% high on some
        rows on the H100, ``bench/README.md``, "Does Bench predict what ships?")."""
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=self.device)
        winner, gemm = self.launcher_for(problem, config, workspace)
        try:
            launchers = dict(zip(VERDICT_PAIR, (torch_launcher(problem), winner), strict=True))
            return windowed_samples(problem, launchers, self.device, timing, rounds)
        finally:
            if gemm is not None:  # None: a Triton config, no cuBLASLt descriptors to free
                gemm.close()

    def launcher_for(
        self, problem: GemmProblem, config: dict | None, workspace: torch.Tensor
    ) -> tuple[Callable[[OperandSet], None], LtGemm | None]:
        """Run a saved winner (``None``: torch's default; a Triton config: this project's kernel); the caller
        closes the returned ``LtGemm``."""
        if config is None:
            return torch_launcher(problem), None
        own = own_launcher(problem, config)
        if own is not None:
            return own, None
        gemm = LtGemm(problem, self.handle, workspace)
        return gemm.launcher(record_from_config(gemm, config)), gemm
