"""Record the ``torch._scaled_mm`` calls of a workload where TunableOp does not (CUDA torch < 2.15).

torch sends ``_scaled_mm`` to ``ScaledGemmTunableOp`` only in ROCm builds before 2.15, so record mode writes
no FP8 GEMM on an NVIDIA GPU. Collection therefore sets ``GEMM_TUNE_RECORD_SCALED=<dir>`` and puts the
runtime's ``autoload/`` on ``PYTHONPATH``: every Python process of the workload installs a ``ScaledRecorder``
on importing torch. It overrides the CUDA kernels of ``aten::_scaled_mm`` and ``aten::_scaled_mm.out``,
counts each call under the key torch 2.15 writes for CUDA scaled GEMMs (``scaled.scaled_problem``), hands
the call to torch's own kernel, and at exit writes ``untuned_scaled_<pid>.csv`` (one line per key, as
TunableOp's untuned files) and ``scaled_calls_<pid>.json`` (calls per key, calls left unkeyed per reason)
beside TunableOp's own file, where collection and GatherShapes read both.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from pathlib import Path

from ..atomic import atomic_write_text
from ..errors import BadInput
from ..formats.solution_names import release
from ..formats.tunableop import format_key
from .graphs import add_replayed
from .scaled import problem_of_call

RECORD_ENV = "GEMM_TUNE_RECORD_SCALED"
UNTUNED_PREFIX = "untuned_scaled_"
CALLS_PREFIX = "scaled_calls_"
OVERLOADS = ("_scaled_mm", "_scaled_mm.out")


def tunableop_records_scaled(torch_version: str, hip: str | None) -> bool:
    """Whether this torch's TunableOp records ``_scaled_mm`` itself (ROCm builds; CUDA from 2.15)."""
    return bool(hip) or release(torch_version) >= (2, 15)


class ScaledRecorder:
    """Counts ``_scaled_mm`` calls by TunableOp key; ``write`` leaves them in ``directory``."""

    def __init__(self, directory: str | Path, dispatch_key: str = "CUDA", graphs=None) -> None:
        import torch

        self.directory, self.dispatch_key = Path(directory).absolute(), dispatch_key
        self.graphs = graphs  # a runtime.graphs.GraphCounter: calls inside a capture count once per replay
        self.calls: Counter = Counter()  # "<op>,<params>" -> calls, in the order first seen
        self.captured: dict[str, Counter] = {}  # graph -> calls while it was captured
        self.skipped: Counter = Counter()  # reason -> calls left unkeyed
        self._keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, dispatch_key))
        self._lib = None

    def install(self) -> None:
        import torch

        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            for name in OVERLOADS:
                fallback = torch.library.get_kernel(f"aten::{name}", self.dispatch_key).call_boxed
                lib.impl(name, self._kernel(fallback), self.dispatch_key)
        self._lib = lib

    def _kernel(self, fallback):
        keyset, calls, skipped, graphs = self._keyset, self.calls, self.skipped, self.graphs

        def kernel(
            x, y, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False, *, out=None
        ):
            problem = problem_of_call(x, y, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
            if isinstance(problem, str):
                skipped[problem] += 1
            elif graphs is not None and graphs.capturing is not None:
                self.captured.setdefault(graphs.capturing, Counter())[",".join(format_key(problem))] += 1
            else:
                calls[",".join(format_key(problem))] += 1
            kwargs = {} if out is None else {"out": out}
            return fallback(keyset, x, y, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum, **kwargs)

        return kernel

    def uninstall(self) -> None:
        if self._lib is not None:
            self._lib._destroy()
            self._lib = None

    def write(self) -> list[Path]:
        """The untuned file and the call counts of this process (nothing when it made no call); a call
        captured in a CUDA graph counts once per replay of that graph."""
        if self.graphs is not None:  # only a counter fills ``captured``
            add_replayed(self.calls, self.captured, self.graphs.replays)
        self.captured = {}
        if not self.calls and not self.skipped:
            return []
        pid = os.getpid()
        untuned = self.directory / f"{UNTUNED_PREFIX}{pid}.csv"
        counts = self.directory / f"{CALLS_PREFIX}{pid}.json"
        written = [counts]
        if self.calls:
            atomic_write_text(untuned, "".join(f"{key}\n" for key in self.calls))
            written.insert(0, untuned)
        atomic_write_text(
            counts, json.dumps({"calls": dict(self.calls), "skipped": dict(self.skipped)}, indent=1) + "\n"
        )
        return written


def read_counts(directory: str | Path) -> tuple[Counter, Counter]:
    """The calls per key and the unkeyed calls per reason that every recorder process left in ``directory``."""
    calls, skipped = Counter(), Counter()
    for path in sorted(Path(directory).glob(f"{CALLS_PREFIX}*.json")):
        try:
            data = json.loads(path.read_text())
            calls.update(data["calls"])
            skipped.update(data["skipped"])
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise BadInput(
                f"{path}: not a scaled-call count the recorder writes ({type(err).__name__}: {err})"
            ) from None
    return calls, skipped
