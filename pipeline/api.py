"""The names scripts outside the package may import: the benchmarks in ``bench/`` and a user's own scripts.

Everything else in ``pipeline`` is internal and may change between commits; a name here is kept, or renamed with
a note in docs/decisions.md. ``pipeline.runtime`` (what images ship) is public as a whole. Names load on first
use, so importing this module pulls in neither torch nor nvmath::

    from pipeline.api import GemmProblem, TimingSettings, interleaved

``tests/test_layout.py`` holds that ``bench/`` imports ``pipeline`` through this module and ``pipeline.runtime``
alone.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> "module:attribute" (the module alone where the name is the module)
_WHERE = {
    # the data model and its files
    "GemmProblem": "pipeline.problem:GemmProblem",
    "TENSORWISE_E4M3": "pipeline.problem:TENSORWISE_E4M3",
    "dtype_bytes": "pipeline.problem:dtype_bytes",
    "TunableOpEntry": "pipeline.formats.tunableop:TunableOpEntry",
    "format_key": "pipeline.formats.tunableop:format_key",
    "write_tunableop_results": "pipeline.formats.tunableop:write_file",
    "load_json": "pipeline.formats.json_file:load",
    "atomic_write_json": "pipeline.atomic:atomic_write_json",
    "claim_output_file": "pipeline.atomic:claim_output_file",
    "note_written": "pipeline.atomic:note_written",
    "BadInput": "pipeline.errors:BadInput",
    "INPUT": "pipeline.errors:INPUT",
    "geomean": "pipeline.stats:geomean",
    "round_order": "pipeline.stats:round_order",
    "run_process": "pipeline.procs:run",
    "tail_lines": "pipeline.procs:tail_lines",
    # the stages' entry points
    "gather": "pipeline.stages.gather.shapes:gather",
    "read_shapes_json": "pipeline.stages.gather.shapes:read_shapes_json",
    "grid_gemm_seconds": "pipeline.stages.gather.grid_budget:gemm_seconds",
    "grid_gemm_class": "pipeline.stages.gather.grid_budget:gemm_class",
    "GRID_GEMM_CLASSES": "pipeline.stages.gather.grid_budget:SECONDS_BY_CLASS",
    "problem_id": "pipeline.stages.bench.tune:problem_id",
    "stack_facts": "pipeline.stages.run.fingerprint:stack_facts",
    "ab_test": "pipeline.stages.validate.e2e:ab_test",
    "ab_outcome": "pipeline.stages.validate.e2e:outcome",
    "ab_interrupted": "pipeline.stages.validate.e2e:interrupted",
    "runtime_flags": "pipeline.stages.validate.e2e:runtime_flags",
    "ab_host_budget": "pipeline.stages.validate.acceptance:host_budget_of",
    "ab_budget_line": "pipeline.stages.validate.e2e_report:budget_line",
    "ab_pairs_needed": "pipeline.stages.validate.e2e_report:pairs_needed",
    "agreement_upgraded": "pipeline.stages.validate.agreement:upgraded",
    # the serving workload
    "CAPTURE_SIZES": "pipeline.workloads.engine:CAPTURE_SIZES",
    "padded_size": "pipeline.workloads.engine:padded_size",
    # tuning and timing (torch, nvmath)
    "DEFAULT": "pipeline.backends.base:DEFAULT",
    "TuneSettings": "pipeline.backends.base:TuneSettings",
    "CublasLtBackend": "pipeline.backends.cublaslt:CublasLtBackend",
    "pool_of": "pipeline.backends.pool:pool_of",
    "TIERS": "pipeline.backends.selection:TIERS",
    "finalists": "pipeline.backends.selection:finalists",
    "BelowFloor": "pipeline.backends.measure:BelowFloor",
    "GraphTimer": "pipeline.backends.measure:GraphTimer",
    "TimingSettings": "pipeline.backends.measure:TimingSettings",
    "bandwidth": "pipeline.backends.measure:bandwidth",
    "check_numerics": "pipeline.backends.measure:check_numerics",
    "copies_of": "pipeline.backends.measure:copies_of",
    "copy_and_read": "pipeline.backends.measure:copy_and_read",
    "device_info": "pipeline.backends.measure:device_info",
    "interleaved": "pipeline.backends.measure:interleaved",
    "l2_bytes": "pipeline.backends.measure:l2_bytes",
    "poison": "pipeline.backends.measure:poison",
    "rotating_operands": "pipeline.backends.measure:rotating_operands",
    # kernels
    "LtGemm": "pipeline.kernels.lt_gemm:LtGemm",
    "new_record": "pipeline.kernels.cublaslt_algo:new_record",
    "read_config": "pipeline.kernels.cublaslt_algo:read_config",
    "OperandSet": "pipeline.kernels.torch_gemm:OperandSet",
    "reference": "pipeline.kernels.torch_gemm:reference",
    "torch_views": "pipeline.kernels.torch_gemm:torch_views",
    "TRITON_PREFIX": "pipeline.kernels.triton_gemm:PREFIX",
    "triton_configs": "pipeline.kernels.triton_gemm:configs",
    "triton_config_from_name": "pipeline.kernels.triton_gemm:config_from_name",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"pipeline.api has no {name!r}: docs/design.md lists what scripts may import")
    module, _, attribute = where.partition(":")
    value = importlib.import_module(module)
    return getattr(value, attribute) if attribute else value


def __dir__() -> list[str]:
    return __all__
