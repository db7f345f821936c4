"""The ``torch.library`` kernels that route ``aten::mm``, ``aten::addmm``, ``aten::bmm`` and ``aten::_scaled_mm``
through tuned plans, and their ``.out`` overloads, which compiled code calls (Inductor's extern kernels write
into buffers it owns).

Each call is routed only when everything the tuned row was measured under still holds; anything else goes to
torch's own kernel for that dispatch key (fetched before ours replaces it), counted by reason:

* the dtype and layout map to a tuned key (``frame.gemm_key``; fp32 keys carry TF32 as torch names it),
* ``addmm`` has ``alpha == beta == 1``; its key is the one torch records: ``gemm_and_bias`` where torch
  hands the bias to the cuBLASLt epilogue (``epilogue_bias``), else ``gemm`` over the output that the bias
  was broadcast into, accumulated with beta 1 (``BiasCopied``: a 2-D or expanded bias, a strided one,
  ``DISABLE_ADDMM_CUDA_LT=1``),
* reduced-precision reductions (and their split-K form, torch >= 2.12) are allowed, as by torch's default,
  under which the tuner measured; fp16 accumulation is off; deterministic algorithms are off,
* operands sit on the current device,
* a ``_scaled_mm`` is keyed as the recorder keyed it (``scaled.problem_of_call``: tensorwise or rowwise fp32
  scales, no output scale) and its bias, if any, is a contiguous vector the cuBLASLt epilogue takes.

Autocast needs no rule of its own: its wrappers sit above the backend key and cast the operands first, so
the kernel sees the cast dtypes, which is the key the collection recorded under autocast and the tuned row
was measured with (``torch.is_autocast_enabled`` even reads False down here: the key is excluded).

Only the ops the table has rows for are overridden (``ROUTED_BY``): a table without ``bmm`` rows leaves ``bmm``
to torch, at no cost. A signature cache (shapes, strides, dtype, device, compute mode) makes a repeated call
one dict lookup, and a call whose signature has no row ends there (nothing else is read); a call that found a
plan is then checked against the settings, the current device and ``out``. docs/triton.md, "Host-bound
workloads", has what a call costs.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Protocol

import torch

from ..formats.tunableop import format_key
from .frame import gemm_key
from .scaled import problem_of_call
from .table import TUNED_DEFAULT, RuntimeKey, TunedTable, key_text, runtime_key

DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32", torch.float64: "float64"}
ROUTED_BY = {  # the aten ops routed, and the row ops their calls can run on (addmm: a bias copied into a gemm's output)
    "mm": {"gemm"},
    "addmm": {"gemm_and_bias", "gemm"},
    "bmm": {"gemm_strided_batched"},
    "_scaled_mm": {"scaled_gemm"},
}
_MISSING = object()
MAX_SIGNATURES = 65536
MAX_UNTUNED = 256  # keys without a tuned row kept for the status record (the first ones met)


class Fallback(str):
    """Why a call goes to torch's own kernel: the router's answer where there is no plan. A ``str`` whose text
    the status counts (``fallbacks``); the hot path tells it from a plan by ``type(...) is Fallback``."""

    __slots__ = ()


class Plan(Protocol):
    """A tuned row built for one device (``cublaslt.LtPlan``; ``BiasCopied`` wraps one)."""

    name: str
    calls: int
    accumulates: bool  # takes ``accumulate`` (beta 1): torch's unfused addmm can run on it

    def run(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        bias: torch.Tensor | None,
        out: torch.Tensor | None = None,
        accumulate: bool = False,
        scales: tuple | None = None,
    ) -> torch.Tensor: ...

    def close(self) -> None: ...


class Executor(Protocol):
    """What builds plans (``cublaslt.CublasLtExecutor``; a CPU double in the tests)."""

    errors: tuple[type[Exception], ...]  # what ``plan`` raises for a row this library refuses

    def plan(self, *found: object) -> Plan: ...

    def current_device(self) -> int: ...

    def device_name(self, device: int) -> str: ...


Route = Plan | Fallback


def blocked(dtype: torch.dtype) -> Fallback | None:
    """Why a call of ``dtype`` must not take a tuned plan now (None: it may); fp32 is keyed by its TF32 flag."""
    if torch.are_deterministic_algorithms_enabled():
        return DETERMINISTIC
    if dtype is torch.bfloat16 and not _allowed(torch._C._get_cublas_allow_bf16_reduced_precision_reduction()):
        return Fallback("bf16 reduced-precision reduction off")
    if dtype is torch.float16 and (
        not _allowed(torch._C._get_cublas_allow_fp16_reduced_precision_reduction()) or _fp16_accumulation()
    ):
        return Fallback("fp16 reduced-precision reduction off or fp16 accumulation on")
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


OUT_MISFIT = Fallback("out= not a contiguous output of the product's shape and dtype")
DETERMINISTIC = Fallback("deterministic algorithms on")
OTHER_DEVICE = Fallback("operands not on the current device")
KEY_MARK = " @ "  # a no-row fallback's text: the reason, then the call's TunableOp key
ALPHA_BETA = Fallback("alpha or beta not 1")
NO_ACCUMULATE = Fallback("bias copied into the output first (torch's unfused addmm): a Triton row takes a vector bias")


def out_fits(out: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, device: int) -> bool:
    """Whether ``out`` is the contiguous output a plan writes: ``shape`` and ``dtype`` on ``device``."""
    return out.shape == shape and out.dtype == dtype and out.is_contiguous() and out.get_device() == device


def contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """``Tensor.is_contiguous()`` from a shape and strides (dimensions of size 1 take any stride)."""
    expected = 1
    for size, step in zip(reversed(shape), reversed(stride), strict=True):
        if size != 1 and step != expected:
            return False
        expected *= size
    return True


def epilogue_bias(
    y_shape: tuple[int, ...], bias_shape: tuple[int, ...], bias_stride: tuple[int, ...], lt_disabled: bool = False
) -> bool:
    """Whether torch's CUDA addmm (alpha = beta = 1, no activation) may give this bias to the cuBLASLt epilogue
    (``GemmAndBias``): a contiguous vector of the output's width (1-D, or 1-D once its size-1 dimensions are
    dropped), with the Lt path not disabled by ``DISABLE_ADDMM_CUDA_LT=1`` (aten/src/ATen/native/cuda/Blas.cpp,
    ``isInputCompliesAddmmCudaLt``). Versions differ on M, K or N of 1 (2.11 fuses M = 1), so the router looks
    for this key first and for the ``Gemm`` of the unfused path next: the table holds what torch recorded."""
    squeezed = [size for size in bias_shape if size != 1]
    vector = len(bias_shape) == 1 or len(squeezed) == 1
    return not lt_disabled and vector and bias_shape[-1] == y_shape[-1] and contiguous(bias_shape, bias_stride)


def expandable(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    """Whether a tensor of ``shape`` broadcasts to ``to``."""
    return len(shape) <= len(to) and all(s in (1, t) for s, t in zip(reversed(shape), reversed(to), strict=False))


class BiasCopied:
    """torch's unfused addmm on a tuned ``gemm`` row: the bias broadcast into the output, then the product
    accumulated onto it (beta 1), as torch runs an addmm whose bias its cuBLASLt epilogue does not take."""

    __slots__ = ("plan",)

    def __init__(self, plan) -> None:
        self.plan = plan

    def run(self, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None):
        shape = (*x.shape[:-1], y.shape[-1])
        if out is None:
            out = x.new_empty(shape)
        if not (bias.data_ptr() == out.data_ptr() and bias.shape == out.shape and bias.stride() == out.stride()):
            out.copy_(bias.expand(shape))
        return self.plan.run(x, y, None, out, accumulate=True)


class Router:
    """Tuned plans by call signature, torch's kernels as the fallback, and what happened to every call."""

    def __init__(self, table: TunedTable, executor: Executor, dispatch_key: str = "CUDA") -> None:
        self.table, self.executor, self.dispatch_key = table, executor, dispatch_key
        self.plans: dict[tuple, Route] = {}  # signature -> plan, or why it falls back
        self.rejected: dict[RuntimeKey, str] = {}  # tuned rows this library refused to build
        self._built: dict[tuple[RuntimeKey, int], Route] = {}
        self.fallbacks: Counter = Counter()
        self.untuned: dict[RuntimeKey, None] = {}  # keys of calls that found no tuned row, in the order met
        self.plan_build_s = 0.0  # time spent building plans (once per row and device): a fixed cost of the run
        self._lib: torch.library.Library | None = None
        self._torch_kernels: dict[str, Callable] | None = None
        self._keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, dispatch_key))
        self.lt_disabled = os.environ.get("DISABLE_ADDMM_CUDA_LT") == "1"  # torch reads it once, as here
        self._route = self._router()
        self.scaled = ScaledRoutes(self)

    # -- registration --------------------------------------------------------------------------------------
    def install(self) -> None:
        """``register`` the kernels and build this project's Triton kernels now."""
        self.register()
        self.build_own_kernels(self.executor.current_device())

    def register(self) -> None:
        """Override the kernels of the ops the table has rows for (``ROUTED_BY``), and their ``.out`` overloads,
        which compiled code calls (Inductor's extern kernels). An op with no row keeps torch's own kernel: its
        calls pay nothing for the runtime. ``unregister`` puts torch's back (the plans and counts stay)."""
        if self._lib is not None:
            return
        ops = self.routed_ops()
        names = [*ops, *(f"{name}.out" for name in ops)]
        if self._torch_kernels is None:  # torch's own, fetched before ours first replaces them
            get = torch.library.get_kernel
            self._torch_kernels = {name: get(f"aten::{name}", self.dispatch_key).call_boxed for name in names}
        kernels = self._torch_kernels
        makers = {
            "mm": lambda fallback: self._product("gemm", fallback),
            "addmm": self._addmm,
            "bmm": lambda fallback: self._product("gemm_strided_batched", fallback),
            "_scaled_mm": self.scaled.kernel,
        }
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            for name in names:
                lib.impl(name, makers[name.removesuffix(".out")](kernels[name]), self.dispatch_key)
        self._lib = lib

    def routed_ops(self) -> list[str]:
        """The aten ops whose calls can find a row of this table (``ROUTED_BY``, in its order)."""
        keys = {key[0] for key in self.table.solutions}
        return [name for name, rows in ROUTED_BY.items() if keys & rows]

    def build_own_kernels(self, device: int) -> None:
        """Build the plans of the rows that run this project's Triton kernels on ``device`` now, each compiled
        or loaded from Triton's cache (``runtime/triton_plan.py``), rather than on their first call, inside the
        workload's timed code; where such a row serves an M range, one count of each kernel the range compiles
        apart instead of each count (``TunedTable.triton_builds``). A row refused here falls back from its first
        call, with the reason."""
        for key, found in self.table.triton_builds().items():
            self._build(key, found, device)

    def unregister(self) -> None:
        if self._lib is not None:
            self._lib._destroy()
            self._lib = None

    # -- the kernels ---------------------------------------------------------------------------------------
    def _product(self, op: str, fallback: Callable) -> Callable:
        """The kernel of ``mm`` (op ``gemm``) or ``bmm`` (``gemm_strided_batched``), and of their ``.out``
        overloads (``out`` given): ``x @ y``."""
        keyset, fallbacks, route = self._keyset, self.fallbacks, self._route

        def kernel(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
            plan = route(op, x, y, None, out)
            if type(plan) is Fallback:
                fallbacks[plan] += 1
                return fallback(keyset, x, y) if out is None else fallback(keyset, x, y, out=out)
            return plan.run(x, y, None, out)

        return kernel

    def _addmm(self, fallback: Callable) -> Callable:
        """The kernel of ``addmm`` and ``addmm.out`` (``out`` given): ``bias + x @ y``."""
        keyset, fallbacks, route = self._keyset, self.fallbacks, self._route

        def addmm(
            bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, beta=1, alpha=1, out: torch.Tensor | None = None
        ) -> torch.Tensor:
            plan = route("gemm_and_bias", x, y, bias, out) if beta == 1 and alpha == 1 else ALPHA_BETA
            if type(plan) is Fallback:
                fallbacks[plan] += 1
                if out is None:
                    return fallback(keyset, bias, x, y, beta=beta, alpha=alpha)
                return fallback(keyset, bias, x, y, beta=beta, alpha=alpha, out=out)
            return plan.run(x, y, bias, out)

        return addmm

    def _no_row(self, key: RuntimeKey) -> Fallback:
        """The fallback of a call signature whose key has no tuned row (none for its weight, or none at its token
        count: ``TunedTable.miss``), the key noted for the status. Once per signature: the cache keeps it. Its
        text carries the key after ``KEY_MARK``, so the count the hot path keeps anyway is also a count per key
        (``fallback_counts`` splits them), at no cost to the call."""
        if len(self.untuned) < MAX_UNTUNED:
            self.untuned.setdefault(key, None)
        return Fallback(f"{self.table.miss(key)}{KEY_MARK}{key_text(key)}")

    def _build(self, key: RuntimeKey, found: tuple, device: int) -> Route:
        """The plan of a tuned row on ``device`` (built once), or why this library refused it."""
        if (key, device) not in self._built:
            start = time.perf_counter()
            try:
                self._built[(key, device)] = self.executor.plan(*found, device)
            except self.executor.errors as err:
                self.rejected[key] = f"{type(err).__name__}: {err}"
                self._built[(key, device)] = Fallback(f"tuned row rejected by this library ({err})")
            self.plan_build_s += time.perf_counter() - start
        return self._built[(key, device)]

    # -- routing -------------------------------------------------------------------------------------------
    def _router(self) -> Callable:
        """``route(op, x, y, bias, out)``: the plan for this call, or why it falls back (``Fallback``). The hot path
        of every GEMM of a routed op in the process, names bound once: a call is one tuple and one dict lookup,
        and a call without a tuned row ends there. Only a call that found a plan is checked against what its row
        was tuned under, every call: the settings (``blocked``), the current device, ``out``."""
        plans, resolve = self.plans, self._resolve
        tf32, fp32, current_device = torch._C._get_cublas_allow_tf32, torch.float32, self.executor.current_device

        def route(op: str, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None):
            dtype = x.dtype
            signature = (
                op,
                x.shape,
                x.stride(),
                y.shape,
                y.stride(),
                dtype,
                y.dtype,
                x.get_device(),
                y.get_device(),
                dtype is fp32 and tf32(),
                None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device()),
            )
            plan = plans.get(signature, _MISSING)
            if plan is _MISSING:
                if signature[7] != current_device():
                    return OTHER_DEVICE  # a plan is built on the device it runs on, from a call made there
                if len(plans) >= MAX_SIGNATURES:
                    plans.clear()
                plan = plans[signature] = resolve(signature)
            if type(plan) is Fallback:
                return plan
            reason = blocked(dtype)  # a plan: what its row was tuned under must hold now
            if reason:
                return reason
            if signature[7] != current_device():
                return OTHER_DEVICE
            if out is not None and not out_fits(out, (*x.shape[:-1], y.shape[-1]), dtype, signature[7]):
                return OUT_MISFIT  # not the contiguous output of x @ y a plan writes
            return plan

        return route

    def _resolve(self, signature: tuple):
        op, x_shape, x_stride, y_shape, y_stride, dtype, y_dtype, device, y_device, tf32, bias = signature
        name = DTYPE_NAMES.get(dtype)
        compute = compute_type(dtype, tf32)
        if name is None or y_dtype != dtype or y_device != device:
            return Fallback("dtype or device not routed")
        if len(x_shape) != (3 if op == "gemm_strided_batched" else 2) or 0 in x_shape or 0 in y_shape:
            return Fallback("empty or unexpected operand shape")
        forms, tried = [(op, False)], []  # (op, the bias copied into the output); the keys looked up
        if bias is not None:
            bias_shape, bias_stride, bias_dtype, bias_device = bias
            if bias_dtype != dtype or bias_device != device or not expandable(bias_shape, (x_shape[0], y_shape[1])):
                return Fallback("bias of another dtype or device, or not broadcastable to the output")
            fused = epilogue_bias(y_shape, bias_shape, bias_stride, self.lt_disabled)
            forms = [(op, False), ("gemm", True)] if fused else [("gemm", True)]
        for form in forms:
            key = gemm_key(form[0], name, compute, x_shape, x_stride, y_shape, y_stride)
            if key is None:
                return Fallback("layout torch copies first")
            tried.append(key)
            found = self.table.find(key)
            if found is not None:
                break
        else:
            return self._no_row(tried[0])
        copied = form[1]
        plan = self._build(key, found, device)
        if not copied or type(plan) is Fallback:
            return plan
        return BiasCopied(plan) if plan.accumulates else NO_ACCUMULATE

    # -- reporting -----------------------------------------------------------------------------------------
    def fallback_counts(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """Calls that went to torch, by reason; the calls of those without a row by TunableOp key; and of those,
        by key, the ones whose token count the tuner settled on torch's default (``TUNED_DEFAULT``)."""
        reasons: Counter = Counter()
        missed: dict[str, int] = {}
        defaulted: dict[str, int] = {}
        for text, calls in self.fallbacks.items():
            reason, _, key = text.partition(KEY_MARK)
            reasons[reason] += calls
            if key:
                counts = defaulted if reason == TUNED_DEFAULT else missed
                counts[key] = counts.get(key, 0) + calls
        return dict(reasons), missed, defaulted

    def tuned_calls(self) -> dict[str, int]:
        """Calls that ran a tuned plan, as ``"<solution> <TunableOp key>"``: the key the bundle's row has."""
        return {
            f"{plan.name} {','.join(format_key(self.table.solutions[key][0]))}": plan.calls
            for (key, _), plan in self._built.items()
            if type(plan) is not Fallback and plan.calls
        }

    def close(self) -> None:
        for plan in self._built.values():
            if type(plan) is not Fallback:
                plan.close()
        self._built.clear()
        self.plans.clear()


class ScaledRoutes:
    """The ``_scaled_mm`` path: its calls keyed as the recorder keyed them (``scaled.problem_of_call``), through the
    router's table, plans, signature cache and counts."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def kernel(self, fallback: Callable) -> Callable:
        """The kernel of ``_scaled_mm`` and ``_scaled_mm.out``: ``(x sx) @ (y sy) (+ bias)`` in ``out_dtype``."""
        keyset, fallbacks, route = self.router._keyset, self.router.fallbacks, self.route

        def scaled_mm(
            x, y, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False, *, out=None
        ):
            plan = route(x, y, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum, out)
            if type(plan) is Fallback:
                fallbacks[plan] += 1
                kwargs = {} if out is None else {"out": out}
                return fallback(keyset, x, y, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum, **kwargs)
            return plan.run(x, y, bias, out, scales=(scale_b, scale_a))

        return scaled_mm

    def route(self, x, y, scale_a, scale_b, bias, scale_result, out_dtype, fast, out) -> Route:
        """The plan of a ``_scaled_mm`` call, or why it falls back (cached by signature like ``Router``'s; only a
        call that found a plan reads the settings and the current device)."""
        router = self.router
        metas = tuple(
            (t.shape, t.stride(), t.dtype, t.get_device()) if t is not None else None
            for t in (x, y, scale_a, scale_b, bias, out)
        )
        signature = ("scaled_gemm", metas, scale_result is None, out_dtype, bool(fast))
        plan = router.plans.get(signature, _MISSING)
        if plan is _MISSING:
            device = metas[0][3]
            if device != router.executor.current_device():
                return OTHER_DEVICE  # a plan is built on the device it runs on, from a call made there
            if len(router.plans) >= MAX_SIGNATURES:
                router.plans.clear()
            problem = problem_of_call(x, y, scale_a, scale_b, bias, scale_result, out_dtype, fast)
            plan = router.plans[signature] = self.resolve(problem, bias, out, out_dtype or x.dtype, device)
        if type(plan) is Fallback:
            return plan
        if torch.are_deterministic_algorithms_enabled():
            return DETERMINISTIC
        return plan if metas[0][3] == router.executor.current_device() else OTHER_DEVICE

    def resolve(self, problem, bias, out, out_dtype: torch.dtype, device: int) -> Route:
        if isinstance(problem, str):
            return Fallback(problem)
        if bias is not None and not (bias.dim() == 1 and bias.is_contiguous()):
            return Fallback("bias not a contiguous vector")
        if out is not None and not out_fits(out, (problem.n, problem.m), out_dtype, device):
            return OUT_MISFIT
        key = runtime_key(problem)
        found = self.router.table.find(key)
        if found is None:
            return self.router._no_row(key)
        return self.router._build(key, found, device)
