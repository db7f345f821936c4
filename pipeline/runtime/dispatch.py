"""The ``torch.library`` kernels that route ``aten::mm``, ``aten::addmm`` and ``aten::bmm`` through tuned plans.

Each call is routed only when everything the tuned row was measured under still holds; anything else goes to
torch's own kernel for that dispatch key (fetched before ours replaces it), counted by reason:

* the dtype and layout map to a tuned key (``frame.gemm_key``; fp32 keys carry TF32 as torch names it),
* ``addmm`` has a contiguous vector bias of the output's width, ``alpha == beta == 1``,
* reduced-precision reductions (and their split-K form, torch >= 2.12) are allowed, as by torch's default,
  under which the tuner measured; fp16 accumulation is off; deterministic algorithms are off,
* operands sit on the current device.

Autocast needs no rule of its own: its wrappers sit above the backend key and cast the operands first, so
the kernel sees the cast dtypes, which is the key the collection recorded under autocast and the tuned row
was measured with (``torch.is_autocast_enabled`` even reads False down here: the key is excluded).

A signature cache (shapes, strides, dtype, device, compute mode) makes a repeated call one dict lookup.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable

import torch

from .frame import gemm_key
from .table import RuntimeKey, TunedTable

DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32",
               torch.float64: "float64"}
OPS = {"mm": "gemm", "addmm": "gemm_and_bias", "bmm": "gemm_strided_batched"}
_MISSING = object()
MAX_SIGNATURES = 65536


def blocked(dtype: torch.dtype) -> str | None:
    """Why a call of ``dtype`` must not take a tuned plan now (None: it may); fp32 is keyed by its TF32 flag."""
    if torch.are_deterministic_algorithms_enabled():
        return "deterministic algorithms on"
    if dtype is torch.bfloat16 and not _allowed(torch._C._get_cublas_allow_bf16_reduced_precision_reduction()):
        return "bf16 reduced-precision reduction off"
    if dtype is torch.float16 and (not _allowed(torch._C._get_cublas_allow_fp16_reduced_precision_reduction())
                                   or _fp16_accumulation()):
        return "fp16 reduced-precision reduction off or fp16 accumulation on"
    return None


def _allowed(flag: bool | tuple[bool, ...]) -> bool:
    """torch <= 2.11 returns the flag, later ones (allow, allow_splitk)."""
    return all(flag) if isinstance(flag, tuple) else bool(flag)


def _fp16_accumulation() -> bool:
    getter = getattr(torch._C, "_get_cublas_allow_fp16_accumulation", None)
    return bool(getter()) if getter else False


def compute_type(dtype: torch.dtype, tf32: bool) -> str:
    """TunableOp's compute type of a call: fp32 by the TF32 flag read for its signature."""
    if dtype is torch.float32:
        return "tf32" if tf32 else "float32"
    return "float64" if dtype is torch.float64 else "float32"


class Router:
    """Tuned plans by call signature, torch's kernels as the fallback, and what happened to every call."""

    def __init__(self, table: TunedTable, executor, dispatch_key: str = "CUDA") -> None:
        self.table, self.executor, self.dispatch_key = table, executor, dispatch_key
        self.plans: dict[tuple, object] = {}  # signature -> plan, or the reason (str) it falls back
        self.rejected: dict[RuntimeKey, str] = {}  # tuned rows this library refused to build
        self._built: dict[tuple[RuntimeKey, int], object] = {}
        self.fallbacks: Counter = Counter()
        self._lib: torch.library.Library | None = None
        self._keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, dispatch_key))
        self._route = self._router()

    # -- registration --------------------------------------------------------------------------------------
    def install(self) -> None:
        kernels = {name: torch.library.get_kernel(f"aten::{name}", self.dispatch_key) for name in OPS}
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            lib.impl("mm", self._product("gemm", kernels["mm"].call_boxed), self.dispatch_key)
            lib.impl("addmm", self._addmm(kernels["addmm"].call_boxed), self.dispatch_key)
            lib.impl("bmm", self._product("gemm_strided_batched", kernels["bmm"].call_boxed), self.dispatch_key)
        self._lib = lib

    def uninstall(self) -> None:
        if self._lib is not None:
            self._lib._destroy()
            self._lib = None

    # -- the kernels ---------------------------------------------------------------------------------------
    def _product(self, op: str, fallback: Callable) -> Callable:
        """The kernel of ``mm`` (op ``gemm``) or ``bmm`` (``gemm_strided_batched``): ``x @ y``."""
        keyset, fallbacks, route = self._keyset, self.fallbacks, self._route

        def kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            plan = route(op, x, y, None)
            if type(plan) is str:
                fallbacks[plan] += 1
                return fallback(keyset, x, y)
            return plan.run(x, y, None)

        return kernel

    def _addmm(self, fallback: Callable) -> Callable:
        keyset, fallbacks, route = self._keyset, self.fallbacks, self._route

        def addmm(bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, beta=1, alpha=1) -> torch.Tensor:
            plan = route("gemm_and_bias", x, y, bias) if beta == 1 and alpha == 1 else "alpha or beta not 1"
            if type(plan) is str:
                fallbacks[plan] += 1
                return fallback(keyset, bias, x, y, beta=beta, alpha=alpha)
            return plan.run(x, y, bias)

        return addmm

    # -- routing -------------------------------------------------------------------------------------------
    def _router(self) -> Callable:
        """``route(op, x, y, bias)``: the plan for this call, or why it falls back (a str). The hot path of
        every GEMM in the process: names bound once, one tuple and one dict lookup per call."""
        plans, resolve, current_device = self.plans, self._resolve, self.executor.current_device
        deterministic, tf32 = torch.are_deterministic_algorithms_enabled, torch._C._get_cublas_allow_tf32
        fp32 = torch.float32

        def route(op: str, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None):
            dtype = x.dtype
            if dtype is not fp32 or deterministic():
                reason = blocked(dtype)
                if reason:
                    return reason
            device = x.get_device()
            if device != current_device():
                return "operands not on the current device"
            signature = (op, x.shape, x.stride(), y.shape, y.stride(), dtype, y.dtype, device, y.get_device(),
                         dtype is fp32 and tf32(),
                         None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device()))
            plan = plans.get(signature, _MISSING)
            if plan is _MISSING:
                if len(plans) >= MAX_SIGNATURES:
                    plans.clear()
                plan = plans[signature] = resolve(signature)
            return plan

        return route

    def _resolve(self, signature: tuple):
        op, x_shape, x_stride, y_shape, y_stride, dtype, y_dtype, device, y_device, tf32, bias = signature
        name = DTYPE_NAMES.get(dtype)
        compute = compute_type(dtype, tf32)
        if name is None or y_dtype != dtype or y_device != device:
            return "dtype or device not routed"
        if len(x_shape) != (3 if op == "gemm_strided_batched" else 2) or 0 in x_shape or 0 in y_shape:
            return "empty or unexpected operand shape"
        key = gemm_key(op, name, compute, x_shape, x_stride, y_shape, y_stride)
        if key is None:
            return "layout torch copies first"
        if bias is not None and (tuple(bias[0]) != (key[5],) or bias[1] != (1,) or bias[2] != dtype
                                 or bias[3] != device):
            return "bias not a contiguous vector of the output's width"
        found = self.table.solutions.get(key)
        if found is None:
            return "no tuned row"
        if (key, device) not in self._built:
            try:
                self._built[(key, device)] = self.executor.plan(*found, device)
            except self.executor.errors as err:
                self.rejected[key] = f"{type(err).__name__}: {err}"
                self._built[(key, device)] = f"tuned row rejected by this library ({err})"
        return self._built[(key, device)]

    # -- reporting -----------------------------------------------------------------------------------------
    def tuned_calls(self) -> dict[str, int]:
        """Calls that ran a tuned plan, by solution and key."""
        return {f"{plan.name} {key}": plan.calls for (key, _), plan in self._built.items()
                if not isinstance(plan, str) and plan.calls}

    def close(self) -> None:
        for plan in self._built.values():
            if not isinstance(plan, str):
                plan.close()
        self._built.clear()
        self.plans.clear()
