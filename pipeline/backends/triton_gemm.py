"""GEMM kernels of our own, written in Triton: a kernel source Bench can draw candidates from where no library
kernel wins (docs/triton.md).

One kernel computes ``out[r, c] = sum_k X[r, k] Y[k, c] (+ bias[c])`` in torch's row-major frame
(``torch_gemm.torch_views``: ``r`` runs over the BLAS ``n``, the tokens of ``F.linear``; ``c`` over ``m``, its
output features), over a grid of ``BLOCK_R x BLOCK_C`` output tiles, split over ``K`` into ``SPLIT_K`` slices
whose fp32 partial sums a second kernel adds in a fixed order (deterministic, bias and cast there); FP8
operands of a tensorwise-scaled ``_scaled_mm`` have the product scaled before the bias. Two config
families share it:

    skinny  rows <= 16 (decode): one 16-row tile holds every token, so each weight tile is read once for all
            of them; split-K fills the GPU when the output has few column tiles
    tiled   more rows: 32-128-row tiles, split-K only where the tiles alone leave SMs idle

``serves(problem)`` says why a problem is not served (None: it is); ``configs(problem, sms)`` are the configs
worth timing for its shape; ``launcher(problem, config)`` runs one on an ``OperandSet``. A config that fails to
compile or to launch raises where it runs: the timing harness scores it as failed, as Triton's autotuner scores
such a config infinite time. ``cache_dir`` keys Triton's compile cache by every version that changes what it
holds. Needs torch and triton (both with the ``cuda`` extra); ``serves``/``configs`` need neither.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..atomic import atomic_write_json
from ..problem import ROWWISE, GemmProblem, dtype_bytes

SERVED_OPS = ("gemm", "gemm_and_bias", "gemm_strided_batched", "scaled_gemm")
SERVED_TYPES = ("bfloat16", "float16")
FP8_TYPES = ("float8_e4m3fn",)  # tensorwise-scaled operands of torch._scaled_mm, out bf16 or fp16
ALIGN_BYTES = 16  # lds in whole 16-byte units, so every tile load can be vectorised
SKINNY_ROWS = 16  # tl.dot's least tile side: a skinny tile holds up to 16 tokens


@dataclass(frozen=True)
class TritonConfig:
    """One compiled variant: tile sides, K split, tile grouping (L2 reuse), warps and pipeline stages."""

    block_r: int
    block_c: int
    block_k: int
    split_k: int = 1
    group: int = 8
    num_warps: int = 4
    num_stages: int = 3

    @property
    def name(self) -> str:
        """The candidate's name in Bench's pool and the bundle."""
        c = self
        return f"triton_r{c.block_r}c{c.block_c}k{c.block_k}_s{c.split_k}_g{c.group}_w{c.num_warps}_st{c.num_stages}"

    @property
    def family(self) -> str:
        return "skinny" if self.block_r == SKINNY_ROWS else "tiled"

    def to_json(self) -> dict:
        return {"source": "triton", "family": self.family, "name": self.name, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> TritonConfig:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def serves(problem: GemmProblem) -> str | None:
    """Why the Triton kernels do not serve ``problem`` (None: they do); the library keeps it."""
    p = problem
    if p.op not in SERVED_OPS:
        return f"{p.op}: no Triton kernel for it yet (served: {', '.join(SERVED_OPS)})"
    if p.op == "scaled_gemm":
        if not (p.a_type == p.b_type and p.a_type in FP8_TYPES and p.c_type in SERVED_TYPES):
            return f"types {p.a_type}/{p.b_type}/{p.c_type}: the scaled kernel takes e4m3 into bf16 or fp16"
        if p.rowwise or ROWWISE in (p.scale_a_recipe, p.scale_b_recipe) or p.output_scale or p.swizzle:
            return "rowwise, output or swizzled scales: the scaled kernel takes tensorwise scales alone"
        if p.bias_type not in (None, p.c_type):
            return f"bias {p.bias_type} on a {p.c_type} output: the scaled kernel adds a bias of the output's type"
    elif not (p.a_type == p.b_type == p.c_type and p.a_type in SERVED_TYPES):
        return f"types {p.a_type}/{p.b_type}/{p.c_type}: the Triton kernels take {' or '.join(SERVED_TYPES)} alone"
    if p.compute_type != "float32":
        return f"compute type {p.compute_type}: the Triton kernels accumulate in float32"
    if p.layout != "TN":
        return f"layout {p.layout}: the Triton kernels read both operands along K (TN, as F.linear records)"
    lda, ldb, _ = p.blas_lds()
    align = int(ALIGN_BYTES // dtype_bytes(p.a_type))
    odd = [f"{name} {ld}" for name, ld in (("lda", lda), ("ldb", ldb)) if ld % align]
    if odd:
        return f"{', '.join(odd)} not a multiple of {align} elements (16 bytes): unaligned tile loads"
    return None


def configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """The configs worth timing for ``problem`` on a GPU of ``sms`` multiprocessors: per family, tiles no larger
    than the problem needs, K slices of at least one K tile, and enough programs to fill the GPU without
    splitting K where the tiles already do."""
    rows, cols, k = problem.n, problem.m, problem.k
    if rows <= SKINNY_ROWS:
        tiles = [(SKINNY_ROWS, c, bk) for c in (32, 64, 128) for bk in (128, 256)]
        splits, warps, stages = (1, 2, 4, 8, 16), (4,), (3, 4)
    else:
        sides = [r for r in (32, 64, 128) if r <= max(32, rows)]
        tiles = [(r, c, bk) for r in sides for c in (64, 128, 256) if r * c <= 128 * 256 for bk in (32, 64)]
        splits, warps, stages = (1, 2, 4), (4, 8), (3, 4)
    found = []
    for r, c, bk in tiles:
        if c > max(32, cols) * 2 or bk > max(32, k):
            continue
        output_tiles = -(-rows // r) * -(-cols // c) * problem.batch
        for split in splits:
            if split > 1 and (k // split < bk or output_tiles >= sms):
                continue  # a slice shorter than a K tile, or a grid the tiles fill already
            if split > 1 and output_tiles * split > 8 * sms:
                continue  # K split into more programs than the GPU holds resident
            found += [TritonConfig(r, c, bk, split, 8, w, s) for w in warps for s in stages if w * 32 * 2 <= r * c]
    return found


def source_hash() -> str:
    """A digest of the kernels' source and of how this module launches them: the cache key's last part."""
    here = Path(__file__).parent
    text = b"".join((here / name).read_bytes() for name in ("triton_gemm.py", "triton_kernels.py"))
    return hashlib.sha256(text).hexdigest()[:16]


def cache_key(gpu: str, capability: str, triton_version: str, torch_version: str) -> dict:
    """Everything that changes what a compiled kernel is, or how fast: the GPU, Triton, torch, the source."""
    return {
        "gpu": gpu,
        "capability": capability,
        "triton": triton_version,
        "torch": torch_version,
        "source": source_hash(),
    }


def cache_dir(root: Path, key: dict) -> Path:
    """Triton's compile cache for ``key`` under ``root``: a directory of its own, named by the key's digest,
    with the key beside its files. One whose key file is missing, unreadable or another key's (a crash while it
    was made, a copy from elsewhere) is rebuilt, never trusted."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(root).absolute() / f"triton-{digest}"
    stamp = path / "key.json"
    try:
        trusted = json.loads(stamp.read_text()) == key
    except (OSError, ValueError):
        trusted = False
    if not trusted:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        atomic_write_json(stamp, key)
    return path


def launcher(problem: GemmProblem, config: TritonConfig) -> Callable:
    """Run ``config`` on an ``OperandSet`` of ``problem``, writing its output (bias added where it has one)."""
    import torch
    import triton

    from .torch_gemm import torch_views
    from .triton_kernels import gemm, reduce

    c = config
    partials: dict = {}

    def launch(ops) -> None:
        x, y, out = torch_views(problem, ops)
        x3, y3, o3 = (t if t.dim() == 3 else t.unsqueeze(0) for t in (x, y, out))
        batch, rows, k = x3.shape
        cols = y3.shape[2]
        k_per = triton.cdiv(triton.cdiv(k, c.split_k), c.block_k) * c.block_k
        bias = ops.bias if ops.bias is not None else o3
        scaled = ops.scale_a is not None
        scale_x, scale_y = (ops.scale_b, ops.scale_a) if scaled else (o3, o3)  # X is BLAS B: torch's scale_b
        part = o3
        if c.split_k > 1:
            key = (o3.device, batch, rows, cols)
            if key not in partials:
                partials[key] = torch.empty((batch, c.split_k, rows, cols), device=o3.device, dtype=torch.float32)
            part = partials[key]
        grid = (triton.cdiv(rows, c.block_r) * triton.cdiv(cols, c.block_c), c.split_k, batch)
        gemm[grid](
            x3, y3, o3, bias, part, scale_x, scale_y, rows, cols, k, k_per,
            *x3.stride(), *y3.stride(), *o3.stride(),
            HAS_BIAS=ops.bias is not None, SCALED=scaled, SPLIT=c.split_k,
            BR=c.block_r, BC=c.block_c, BK=c.block_k, GROUP=c.group, num_warps=c.num_warps, num_stages=c.num_stages,
        )  # fmt: skip
        if c.split_k > 1:
            block = 1024
            reduce[(triton.cdiv(rows * cols, block), batch)](
                part, o3, bias, rows, cols, *o3.stride(),
                HAS_BIAS=ops.bias is not None, SPLIT=c.split_k, BLOCK=block, num_warps=4,
            )  # fmt: skip

    return launch
