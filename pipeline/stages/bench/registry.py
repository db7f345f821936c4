"""Every tuner the Bench stage can run, declared once: its platform, what it needs installed, the kind of work it
does, the parameters it takes and those that enter the stack fingerprint, and a factory.

    cublaslt    NVIDIA  a cuBLASLt search per problem (nvmath-python)       tuner
    hipblaslt   AMD     hipblaslt-bench per problem                          tuner
    tunableop   either  torch's own TunableOp tuning per problem             tuner
    find_exact  AMD     hipBLASLt's find_exact.py on GenerateConfigs' files  config tool
    tensile     AMD     TensileLite on GenerateConfigs' files                config tool

A tuner runs in the Bench workers, one problem at a time, sharded over GPUs (``bench.run_shards``); a config
tool runs once over the config files (``config_tool.tune_configs``). Adding a backend is one module (its
class, on ``backends.base.BackendBase``) and one entry here, its own parameters included (``Param``); the
``--backend`` choices, those parameters on every stack-bound task (``dag/backend_params.py``), Bench's record of
what it was made from, the preflight, the fingerprint's settings and the workers all read this table
(``tests/test_backend_registry.py`` adds one so). A factory imports its module when called,
so the table costs no torch; the imports are ordinary ones, which ``tests/test_layout.py`` sees.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ...backends.base import ToolMissing

Platform = Literal["cuda", "rocm", "either"]
Kind = Literal["tuner", "config tool"]
Params = Mapping[str, Any]  # the task's parameter values by name


@dataclass(frozen=True)
class Param:
    """A parameter a backend takes, as the Luigi tasks declare it (``dag/backend_params.py``) without this table
    importing Luigi (the workers read it): ``kind`` int, float, str or bool, the bounds of a number (both
    included), ``default`` and the help text. Several backends may declare one name; the declarations must then
    be the same."""

    kind: type
    default: Any
    description: str
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class BackendEntry:
    """One backend: see the module's docstring."""

    name: str
    platform: Platform
    kind: Kind
    factory: Callable[..., Any]  # (gpu, **options) -> the backend or config tool
    needs: tuple[tuple[str, str], ...] = ()  # (module, distribution) the workers import
    options: Callable[[Params], dict] = lambda params: {}  # constructor options; checks the tool, before any work
    settings: Mapping[str, str] = field(default_factory=dict)  # fingerprint key -> parameter, beyond backend,
    # margin (Bench's: --tune-margin, or --margin) and time budget (every fingerprint has those)
    flags: Mapping[str, str] = field(default_factory=dict)  # fingerprint key -> boolean parameter, in the
    # fingerprint only when on: a flag added later leaves the fingerprints of runs without it as they were
    flags_on: frozenset[str] = frozenset()  # the flag parameters that are on for this backend unless turned off
    parameters: Mapping[str, Param] = field(default_factory=dict)  # what it takes beyond every backend's own

    def fingerprint_settings(self, params: Params) -> dict:
        """The tuning settings of this backend that are part of the stack fingerprint."""
        return {
            "backend": self.name,
            "margin": params["tune_margin"] if params.get("margin") is None else params["margin"],
            "time_budget": params["time_budget"],
            **{key: params[name] for key, name in self.settings.items()},
            **{key: True for key, name in self.flags.items() if self.flag(name, params)},
        }

    def flag(self, name: str, params: Params) -> bool:
        """Boolean parameter ``name`` for this backend: as given, else (None: not given) on where the backend
        turns it on by default (``flags_on``)."""
        value = params.get(name)
        return name in self.flags_on if value is None else bool(value)

    @property
    def amd(self) -> bool:
        return self.platform == "rocm"

    @property
    def factory_path(self) -> str:
        """``module:function`` of the factory: how a worker process finds it."""
        return f"{self.factory.__module__}:{self.factory.__qualname__}"

    def check(self) -> None:
        """Raise ``ToolMissing`` naming what the workers need and this Python lacks. Found, not imported: the
        scheduler process never pays for torch (the workers do, and report a broken install themselves)."""
        missing = [dist for module, dist in self.needs if importlib.util.find_spec(module) is None]
        if missing:
            raise ToolMissing(
                f"--backend {self.name} needs {' and '.join(missing)}, not installed for {sys.executable}: "
                "pip install -e '.[cuda]' (NVIDIA) or '.[rocm]' with a ROCm torch (AMD)"
            )

    def construct_options(self, params: Params) -> dict:
        """The factory's options from the task's parameters, the tool checked first."""
        self.check()
        return self.options(params)


def load_factory(path: str) -> Callable[..., Any]:
    """The factory at ``module:function`` (a worker's side of ``BackendEntry.factory_path``)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


# ---- the factories: each imports its backend when called ------------------------------------------------


def cublaslt(gpu: int, **options: Any) -> Any:
    from ...backends.cublaslt import CublasLtBackend

    return CublasLtBackend(gpu, **options)


def hipblaslt(gpu: int, **options: Any) -> Any:
    from ...backends.hipblaslt import HipblasltBackend

    return HipblasltBackend(gpu, **options)


def tunableop(gpu: int, **options: Any) -> Any:
    from ...backends.tunableop import TunableOpBackend

    return TunableOpBackend(gpu, **options)


def find_exact(gpu: int, **options: Any) -> Any:
    from .find_exact import FindExact

    return FindExact(gpu, **options)


def tensile(gpu: int, **options: Any) -> Any:
    from .tensile import TensileTool

    return TensileTool(gpu, **options)


# ---- the options: a tool that is missing is named here, before any work ----------------------------------


def _bench(params: Params) -> dict:
    from ...backends.hipblaslt import find_bench

    return {"bench": find_bench(params.get("hipblaslt_bench") or None)}


def _cublaslt(params: Params) -> dict:
    """Unless ``--triton false``, this project's Triton kernels join the pool; their compile cache lives in the
    workdir."""
    if not REGISTRY["cublaslt"].flag("triton", params):
        return {}
    if importlib.util.find_spec("triton") is None:
        raise ToolMissing(
            f"the cublaslt search times this project's Triton kernels too and needs triton (it ships with "
            f"torch's CUDA wheels), not installed for {sys.executable}: pip install -e '.[cuda]', or pass "
            "--triton false to tune with the library alone"
        )
    return {"triton_cache": str(Path(params["workdir"]).absolute() / "triton-cache")}


def _tensile(params: Params) -> dict:
    from . import tensile as tensile_stage

    tensile_stage.locate(params.get("tensile_root") or None)
    return {**_bench(params), "root": params.get("tensile_root") or None}


def _find_exact(params: Params) -> dict:
    from . import find_exact as find_exact_stage

    find_exact_stage.locate(params.get("hipblaslt_root") or None)
    return {"root": params.get("hipblaslt_root") or None}


BENCH_PATH = {
    "hipblaslt_bench": Param(
        str, "", "hipblaslt-bench to run (default: $HIPBLASLT_BENCH, then hipblaslt-bench on PATH)"
    )
}
TUNABLEOP_PARAMS = {
    "tunableop_iterations": Param(int, 100, "tunableop: tuning iterations per candidate", low=0),
    "tunableop_duration_ms": Param(int, 30, "tunableop: tuning ms per candidate", low=0),
    "tunableop_rotating_mb": Param(int, -1, "tunableop: rotating buffer MiB (-1: L2)", low=-1),
    "tunableop_numerical_check": Param(bool, False, "tunableop: check every candidate against Default"),
}
TUNABLEOP_SETTINGS = {
    "iterations": "tunableop_iterations",
    "duration_ms": "tunableop_duration_ms",
    "rotating_mb": "tunableop_rotating_mb",
    "numerical_check": "tunableop_numerical_check",
}


def _tunableop(params: Params) -> dict:
    return {option: params[name] for option, name in TUNABLEOP_SETTINGS.items()}


ENTRIES = (
    BackendEntry(
        "cublaslt",
        "cuda",
        "tuner",
        cublaslt,
        needs=(("torch", "torch"), ("nvmath", "nvmath-python")),
        options=_cublaslt,
        flags={"triton": "triton"},
        flags_on=frozenset({"triton"}),  # docs/triton.md "In Bench"
    ),
    BackendEntry("hipblaslt", "rocm", "tuner", hipblaslt, options=_bench, parameters=BENCH_PATH),
    BackendEntry(
        "tunableop",
        "either",
        "tuner",
        tunableop,
        needs=(("torch", "torch"),),
        options=_tunableop,
        settings=TUNABLEOP_SETTINGS,
        parameters=TUNABLEOP_PARAMS,
    ),
    BackendEntry(
        "find_exact",
        "rocm",
        "config tool",
        find_exact,
        options=_find_exact,
        parameters={
            **BENCH_PATH,
            "hipblaslt_root": Param(str, "", "find_exact: the hipBLASLt build directory (default: $HIPBLASLT_ROOT)"),
        },
    ),
    BackendEntry(
        "tensile",
        "rocm",
        "config tool",
        tensile,
        options=_tensile,
        parameters={
            **BENCH_PATH,
            "tensile_root": Param(str, "", "tensile: hipBLASLt's tensilelite directory (default: $TENSILE_ROOT)"),
        },
    ),
)
REGISTRY: dict[str, BackendEntry] = {entry.name: entry for entry in ENTRIES}


def parameters(entries: Sequence[BackendEntry] | None = None) -> dict[str, Param]:
    """Every backend's own parameters by name, in the table's order (``entries``: the registry's); a name two
    backends declare differently is an error of the table."""
    found: dict[str, Param] = {}
    for backend in REGISTRY.values() if entries is None else entries:
        for name, param in backend.parameters.items():
            if found.setdefault(name, param) != param:
                raise ValueError(f"backend {backend.name} declares --{name.replace('_', '-')} unlike another")
    return found


def entry(name: str) -> BackendEntry:
    """The backend called ``name``; ``ToolMissing``-free, ``KeyError`` for an unknown name."""
    return REGISTRY[name]


def tuners() -> list[str]:
    return [e.name for e in ENTRIES if e.kind == "tuner"]


def config_tools() -> list[str]:
    return [e.name for e in ENTRIES if e.kind == "config tool"]


def amd(name: str) -> bool:
    """Whether ``name`` tunes for AMD only (its GPUs are counted by the AMD tools, its rows are ROCm's)."""
    return name in REGISTRY and REGISTRY[name].amd
