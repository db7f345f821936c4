"""Inductor's autotuning tables, as ``torch.compile`` in a max-autotune mode writes them to stderr.

``AlgorithmSelectorCache.log_results`` (``torch/_inductor/select_algorithm.py``) writes, for every GEMM it
autotunes::

    AUTOTUNE mm(8x4096, 4096x14336)
    strides: [4096, 1], [1, 4096]
    dtypes: torch.bfloat16, torch.bfloat16
      triton_mm_4 0.0123 ms 100.0% ACC_TYPE='tl.float32', BLOCK_K=128, ...
      mm 0.0150 ms 82.0%
    SingleProcess AUTOTUNE benchmarking takes 0.4 seconds and 1.2 seconds precompiling for 19 choices

The choices are listed fastest first (the top ``autotune_num_choices_displayed``, 10 by default), and the
first is the one Inductor compiles in. Extern choices, the BLAS library through ATen, carry the names of
their ``ExternKernelChoice`` (``torch/_inductor/kernel/mm.py``, ``bmm.py``: ``mm``, ``addmm``,
``bias_addmm``, ``bmm``, ``_scaled_mm``, ...); Inductor's own kernels are named after their template
(``triton_mm_4``, ``triton_scaled_mm_device_tma_7``, ``decompose_k_mm_...``). A table whose lines do not
parse is skipped, not fatal: the log is stderr, shared with the workload's own output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

LIBRARY_CHOICES = frozenset(
    {"mm", "mm_dtype", "addmm", "bias_addmm", "bmm", "bmm_dtype", "baddbmm", "_scaled_mm", "_int_mm", "_fp8_mm"}
)
_HEADER = re.compile(r"^AUTOTUNE (?P<op>\w+)\((?P<sizes>[^)]*)\)\s*$")
_CHOICE = re.compile(r"^\s+(?P<name>\S+) (?P<ms>[0-9.]+|inf|nan) ms\b")


@dataclass
class AutotuneTable:
    """One autotuned GEMM: the op, its input sizes as Inductor printed them, and its choices fastest first."""

    op: str
    sizes: str
    dtypes: str = ""
    choices: list[tuple[str, float]] = field(default_factory=list)
    line: int = 0  # where the table starts in the log (1-based)

    @property
    def chosen(self) -> str:
        return self.choices[0][0]

    @property
    def sent_to_library(self) -> bool:
        return self.chosen in LIBRARY_CHOICES

    @property
    def library_ms(self) -> float | None:
        """The fastest library choice Inductor listed, None when none made its top list."""
        return next((ms for name, ms in self.choices if name in LIBRARY_CHOICES), None)

    @property
    def chosen_ms(self) -> float:
        return self.choices[0][1]

    def describe(self) -> str:
        return f"{self.op}({self.sizes})" + (f" {self.dtypes}" if self.dtypes else "")


def read_tables(lines: Iterable[str]) -> list[AutotuneTable]:
    """Every complete autotuning table in ``lines`` (a stderr log), in order."""
    tables: list[AutotuneTable] = []
    table: AutotuneTable | None = None
    for number, line in enumerate(lines, 1):
        header = _HEADER.match(line)
        if header:
            table = AutotuneTable(header["op"], header["sizes"].strip(), line=number)
            tables.append(table)
            continue
        if table is None:
            continue
        if line.startswith("dtypes: "):
            table.dtypes = line[len("dtypes: ") :].strip()
        elif line.startswith("strides: "):
            continue
        elif choice := _CHOICE.match(line):
            table.choices.append((choice["name"], float(choice["ms"])))
        else:
            table = None  # the table ended (its closing line, or the workload's own output)
    return [t for t in tables if t.choices]
