"""Stride padding: move leading dimensions off the byte period that hotspots one memory channel.

On MI300 a leading dimension whose size in bytes is a multiple of 512 sends every row of an operand to
the same memory channel; the ROCm guide pads it (f16 TN with ``K % 256 == 0``: ``lda = ldb = K + 128``).
The rule is per arch; period, pad and operands are settings. A padded problem keeps its original so
validation can time both. (``docs/upstream.md``, "Stride padding": upstream has no such
guidance, so the rule is a setting, on by default for the MI300 family only.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from ...formats.rocm import get_arch
from ...problem import GemmProblem, dtype_bytes

OPERANDS = ("a", "b", "c")


@dataclass(frozen=True)
class PaddingRule:
    """Pad ``operands``' leading dimensions whose byte size is a multiple of ``period_bytes``."""

    period_bytes: int = 512
    pad_elements: int = 128
    operands: tuple[str, ...] = ("a", "b")

    def __post_init__(self) -> None:
        if self.period_bytes < 1 or self.pad_elements < 1:
            raise ValueError("period_bytes and pad_elements must be positive")
        unknown = set(self.operands) - set(OPERANDS)
        if unknown:
            raise ValueError(f"unknown operands {sorted(unknown)}; known: {', '.join(OPERANDS)}")

    def pad_unit(self, element_bytes: float) -> int:
        """``pad_elements``, halved while a pad of that many elements is itself a whole period (fp32, fp64)."""
        unit = self.pad_elements
        while unit > 1 and (unit * element_bytes) % self.period_bytes == 0:
            unit //= 2
        return unit

    def pad_for(self, ld: int, element_bytes: float) -> int:
        """Elements to add to ``ld``: 0 unless ``ld`` bytes are a multiple of the period, else the smallest
        multiple of the pad unit that moves it off the period."""
        if (ld * element_bytes) % self.period_bytes:
            return 0
        unit = self.pad_unit(element_bytes)
        pad = unit
        while ((ld + pad) * element_bytes) % self.period_bytes == 0:
            pad += unit
        return pad


# Arch families whose default rule pads; others are left alone unless a rule is given.
DEFAULT_RULES: dict[str, PaddingRule] = {"MI300": PaddingRule()}


def rule_for_arch(arch: str) -> PaddingRule | None:
    return DEFAULT_RULES.get(get_arch(arch).family)


@dataclass(frozen=True)
class PaddedProblem:
    """A padded problem, the original it was made from, and why each ld changed."""

    problem: GemmProblem
    original: GemmProblem
    reasons: tuple[str, ...]


def pad_problem(problem: GemmProblem, rule: PaddingRule) -> PaddedProblem | None:
    """The padded variant of ``problem``, or ``None`` when no leading dimension needs it."""
    if problem.is_wildcard:
        return None
    lds = dict(zip(OPERANDS, problem.blas_lds(), strict=True))
    types = {"a": problem.a_type, "b": problem.b_type, "c": problem.c_type}
    changes, reasons = {}, []
    for operand in rule.operands:
        ld, size = lds[operand], dtype_bytes(types[operand])
        pad = rule.pad_for(ld, size)
        if pad:
            changes[operand] = ld + pad
            reasons.append(
                f"ld{operand} {ld} x {size:g} B = {ld * size:g} B is a multiple of {rule.period_bytes} B:"
                f" padded by {pad} to {ld + pad}"
            )
    if not changes:
        return None
    lds.update(changes)
    padded = dataclasses.replace(problem, lda=lds["a"], ldb=lds["b"], ldc=lds["c"])
    return PaddedProblem(padded, problem, tuple(reasons))


def plan_padding(problems: Iterable[GemmProblem], rule: PaddingRule | None) -> list[PaddedProblem]:
    """Padded variants of every problem that needs one under ``rule`` (none when ``rule`` is None)."""
    if rule is None:
        return []
    return [p for p in (pad_problem(problem, rule) for problem in problems) if p is not None]
