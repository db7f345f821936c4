"""One validated GEMM: the baseline and the tuned artifact timed on the GPU, the row every later step reads
(the gate, the report, the drift). ``measurements.json`` holds them as JSON, both ways."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, fields

from ...problem import GemmProblem
from ...stats import Stats, round_speedups, window_pairs


@dataclass(frozen=True)
class Pair:
    """Baseline and tuned per-call times measured together (interleaved rounds), and ``paired``, the median of
    the baseline's time over the tuned one's within each round (None in a file written before it was kept, and
    from a timer without rounds of both): a window's operand copies, or a clock, that move both cancel in a
    round, so it repeats better than the medians' ratio (``stats.Verdict``, which Bench's figure is)."""

    baseline: Stats
    tuned: Stats
    paired: float | None = None
    windows: tuple[tuple[float, float], ...] = ()  # per window: the baseline's median and the tuned one's (us)

    @property
    def speedup(self) -> float:
        return self.paired if self.paired is not None else self.baseline.median / self.tuned.median

    @property
    def noise(self) -> float:
        """The relative spread of the pair: the larger interquartile range over its median."""
        return max(0.0, *((s.p75 - s.p25) / s.median for s in (self.baseline, self.tuned)))

    def regressed(self, spread: float | None = None) -> bool:
        """The tuned median is slower than the baseline's by more than ``spread`` (default: the pair's noise)."""
        return self.tuned.median > self.baseline.median * (1 + (self.noise if spread is None else spread))

    def to_json(self) -> dict:
        data = {"baseline": self.baseline.to_json(), "tuned": self.tuned.to_json()}
        if self.paired is not None:
            data["paired_speedup"] = self.paired
        if self.windows:
            data["windows"] = [list(window) for window in self.windows]
        return data

    @classmethod
    def from_json(cls, data: dict) -> Pair:
        windows = tuple(tuple(window) for window in data.get("windows", ()))
        return cls(
            Stats.from_json(data["baseline"]), Stats.from_json(data["tuned"]), data.get("paired_speedup"), windows
        )

    @classmethod
    def of_samples(cls, samples: dict[str, list[float]], windows: int = 1) -> Pair:
        """The pair of interleaved ``samples`` (``"baseline"`` and ``"tuned"``, round by round, pooled over
        ``windows`` windows in order); a row that keeps the default has only the baseline's."""
        baseline = Stats.of(samples["baseline"])
        if "tuned" not in samples:
            return cls(baseline, baseline)
        paired = statistics.median(round_speedups(samples, "baseline", "tuned"))
        return cls(baseline, Stats.of(samples["tuned"]), paired, window_pairs(samples, "baseline", "tuned", windows))


def pooled(first: float, confirmed: float | None) -> float:
    """A row's speedup over its pairs: the geometric mean of the first pair's and the confirmation's (each
    from the same number of rounds), or the first alone where there was no confirmation."""
    return first if confirmed is None else math.sqrt(first * confirmed)


@dataclass(frozen=True)
class Padded:
    """The same GEMM at the leading dimensions the configs stage padded it to, at baseline."""

    key: str
    stats: Stats

    def to_json(self) -> dict:
        return {"key": self.key, "padded": self.stats.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> Padded:
        return cls(data["key"], Stats.from_json(data["padded"]))


@dataclass(frozen=True)
class MeasuredRow:
    """A merged results row as Validate measured it; ``confirm`` is the second pair, on fresh buffers, of a
    row whose first pair came within the margin of the baseline or beat it (``validate.second_look``)."""

    key: str
    op: str
    dtype: str
    layout: str
    m: int
    n: int
    k: int
    batch: int
    solution: str
    calls: int
    time_share: float | None
    flops: float
    floor_us: float
    measured: Pair
    ld_notes: list[str] = field(default_factory=list)
    padded: Padded | None = None
    confirm: Pair | None = None
    held_out_of: str | None = None  # the grid row whose bucket this token count was held out of (``held_out``)

    @classmethod
    def of(
        cls,
        problem: GemmProblem,
        key: str,
        solution: str,
        calls: int,
        time_share: float | None,
        floor_us: float,
        measured: Pair,
        confirm: Pair | None = None,
        padded: Padded | None = None,
        held_out_of: str | None = None,
    ) -> MeasuredRow:
        return cls(
            key,
            problem.op,
            problem.a_type,
            problem.layout,
            problem.m,
            problem.n,
            problem.k,
            problem.batch,
            solution,
            calls,
            time_share,
            problem.flops(),
            floor_us,
            measured,
            problem.ld_notes(),
            padded,
            confirm,
            held_out_of,
        )

    @property
    def baseline(self) -> Stats:
        return self.measured.baseline

    @property
    def tuned(self) -> Stats:
        return self.measured.tuned

    @property
    def speedup(self) -> float:
        return self.measured.speedup

    @property
    def noise(self) -> float:
        return self.measured.noise

    @property
    def label(self) -> str:
        """A readable name (``GemmProblem.label``); the report adds the ld's where two rows read alike."""
        from ...formats.tunableop import parse_key

        return parse_key(*self.key.split(",", 1)).label()

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("measured", "padded", "confirm")}
        return {
            **data,
            **self.measured.to_json(),
            "padded": self.padded.to_json() if self.padded else None,
            "confirm": self.confirm.to_json() if self.confirm else None,
        }

    @classmethod
    def from_json(cls, data: dict) -> MeasuredRow:
        """A row of ``measurements.json`` (files of earlier versions named the calls ``count``)."""
        plain = {
            f.name: data[f.name]
            for f in fields(cls)
            if f.name in data and f.name not in ("measured", "padded", "confirm", "calls", "ld_notes", "time_share")
        }
        return cls(
            **plain,
            calls=data.get("calls", data.get("count", 1)),
            time_share=data.get("time_share"),
            measured=Pair.from_json(data),
            ld_notes=list(data.get("ld_notes") or []),
            padded=Padded.from_json(data["padded"]) if data.get("padded") else None,
            confirm=Pair.from_json(data["confirm"]) if data.get("confirm") else None,
        )
