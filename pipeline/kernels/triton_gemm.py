"""GEMM kernels of our own, written in Triton: a kernel source Bench can draw candidates from where no library
kernel wins (docs/triton.md).

One kernel computes ``out[r, c] = sum_k X[r, k] Y[k, c] (+ bias[c])`` in torch's row-major frame
(``torch_gemm.torch_views``: ``r`` runs over the BLAS ``n``, the tokens of ``F.linear``; ``c`` over ``m``, its
output features), over a grid of ``BLOCK_R x BLOCK_C`` output tiles, split over ``K`` into ``SPLIT_K`` slices
whose fp32 partial sums a second kernel adds in a fixed order (deterministic, bias and cast there); FP8
operands of a tensorwise-scaled ``_scaled_mm`` have the product scaled before the bias. Its families
(``FAMILIES``, one entry each: kernel, name form, when offered, configs):

    gemv    one token where ``literal`` is not offered: ``triton_kernels.gemv``, no ``tl.dot``, a few columns
            a program (the kernel runs one too, as saved winners may)
    literal one token: ``triton_kernels.gemv_literal``, one column a program (eight in saved winners), compiled
            for one frame (every size and stride a literal, as Inductor compiles; a kernel per shape)
    skinny  2-16 tokens: one 16-row tile holds every token, so each weight tile is read once for all of them;
            split-K fills the GPU when the output has few column tiles
    swapped 2-16 tokens: the skinny tile transposed, 64 or 128 weight columns on the MMA's M side (Hopper's
            warpgroup MMA reads them from shared memory) and the tokens on its N side (``triton_kernels.swapped``)
    swapped_range  a swapped winner's config with the token count an argument (``swapped_range``): never
            searched, it is the twin Bench tries over a swapped winner's bucket (``ranged_twin``)
    tiled   more tokens: 32-128-row tiles over 64-long K tiles, split-K only where the tiles leave SMs idle

``gemv``, ``skinny`` and ``tiled`` take their sizes as arguments, so a winner of theirs also serves other token
counts of its weight (a bucket of an M grid, ``serves_range``), and ``swapped_range`` serves any count up to its
16 rows; ``literal`` and ``swapped`` serve their own alone.

``serves(problem)`` says why a problem is not served (None: it is); ``configs(problem, sms)`` are the configs
worth timing for its shape; ``triton_runner.launcher(problem, config)`` runs one on an ``OperandSet``. A config
that fails to compile or to launch raises where it runs: the timing harness scores it as failed, as Triton's
autotuner scores such a config infinite time. ``triton_cache`` keys Triton's compile cache by every version that
changes what it holds. This module needs neither torch nor triton; ``triton_runner`` needs both (the ``cuda``
extra).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from ..problem import ROWWISE, GemmProblem, dtype_bytes

SERVED_OPS = ("gemm", "gemm_and_bias", "gemm_strided_batched", "scaled_gemm")
SERVED_TYPES = ("bfloat16", "float16")
FP8_TYPES = ("float8_e4m3fn",)  # tensorwise-scaled operands of torch._scaled_mm, out bf16 or fp16
ALIGN_BYTES = 16  # lds in whole 16-byte units, so every tile load can be vectorised
SKINNY_ROWS = 16  # tl.dot's least tile side: a skinny tile holds up to 16 tokens
SWAPPED_COLUMNS = (64, 128)  # a warpgroup MMA's M side per 4 warps: 64 columns each
SHARED_BYTES = 224 * 1024  # the pipeline's stages of X and Y tiles must fit the SM's shared memory (H100: 227 KB)
PREFIX = "triton_"  # every solution name of these kernels (``TritonConfig.name``): Bench, bundles, the runtime
SOURCE = "triton"  # a saved config's ``"source"``, and the name of Bench's candidate that says why not served
NOT_SERVED = "not served: "  # that candidate's error, before ``serves``' reason


def is_config(config: dict | None) -> bool:
    """Whether a saved winner's config is one of these kernels' (not a cuBLASLt algorithm's)."""
    return (config or {}).get("source") == SOURCE


@dataclass(frozen=True)
class TritonConfig:
    """One compiled variant: tile sides, K split, tile grouping (L2 reuse), warps and pipeline stages, and its
    family (``FAMILIES``): left empty, the tile's rows name it (``gemv``, ``skinny`` or ``tiled``); the families
    that share a tile shape with those (``swapped``, ``literal``) are named."""

    block_r: int
    block_c: int
    block_k: int
    split_k: int = 1
    group: int = 8
    num_warps: int = 4
    num_stages: int = 3
    family: str = ""

    def __post_init__(self) -> None:
        if not self.family:
            rows = "gemv" if self.block_r == 1 else "skinny" if self.block_r == SKINNY_ROWS else "tiled"
            object.__setattr__(self, "family", rows)
        if self.family not in FAMILIES:
            raise ValueError(f"Triton kernel family {self.family!r}: not one of {', '.join(FAMILIES)}")

    @property
    def name(self) -> str:
        """The candidate's name in Bench's pool and the bundle."""
        c = self
        tiles = f"r{c.block_r}c{c.block_c}k{c.block_k}_s{c.split_k}_g{c.group}_w{c.num_warps}_st{c.num_stages}"
        return PREFIX + tiles + FAMILIES[c.family].suffix

    @property
    def kernel(self) -> str:
        """The name of the ``triton_kernels`` function that runs it."""
        return FAMILIES[self.family].kernel

    def to_json(self) -> dict:
        return {"source": SOURCE, "name": self.name, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> TritonConfig:
        """A saved config; one saved before the family field names it by flags (``swapped``, ``literal``) or by
        its tile alone."""
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        named = [f for f in ("swapped", "literal") if data.get(f)]
        if "family" not in fields or (named and fields["family"] != named[0]):
            fields["family"] = named[0] if named else ""
        return cls(**fields)


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
    """The configs worth timing for ``problem`` on a GPU of ``sms`` multiprocessors: those of every family
    offered at its token count (``Family.offered``), each family's for its shape (``Family.configs``)."""
    return [c for family in FAMILIES.values() if family.offered(problem, sms) for c in family.configs(problem, sms)]


def _one_token_literal(problem: GemmProblem, sms: int) -> bool:
    """One token, where a program per column gives every SM two or more and K fills one of the ``literal``
    kernel's slices: its best came within 0.04% of the best of every family on ten one-token GEMMs
    (docs/triton.md, "What Bench compiles"), so it is offered alone."""
    return problem.n == 1 and problem.m * problem.batch >= 2 * sms and bool(_literal_configs(problem, sms))


def _one_token_gemv(problem: GemmProblem, sms: int) -> bool:
    """One token without the ``literal`` kernel (the skinny tile's best was 4-39% behind gemv's)."""
    return problem.n == 1 and not _one_token_literal(problem, sms)


def _two_to_sixteen(problem: GemmProblem, sms: int) -> bool:
    return 1 < problem.n <= SKINNY_ROWS


def _more_than_sixteen(problem: GemmProblem, sms: int) -> bool:
    return problem.n > SKINNY_ROWS


def _never(problem: GemmProblem, sms: int) -> bool:
    """Not searched: a fixed-size winner's twin, tried over its bucket (``ranged_twin``)."""
    return False


def _skinny_configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """2-16 tokens: one 16-row tile of 32-128 weight columns over 128- or 256-long K tiles."""
    tiles = [(SKINNY_ROWS, c, bk) for c in (32, 64, 128) for bk in (128, 256)]
    return _tile_configs(problem, sms, tiles, (1, 2, 4, 8, 16), (2, 4), (3, 4, 5))


def _tiled_configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """More tokens: 32-128-row tiles over K tiles of 64 (32 below that: a 32-long one was never the best tile on
    the GEMMs measured)."""
    sides = [r for r in (32, 64, 128) if r <= max(32, problem.n)]
    bk = 64 if problem.k >= 64 else 32
    tiles = [(r, c, bk) for r in sides for c in (64, 128, 256) if r * c <= 128 * 256]
    return _tile_configs(problem, sms, tiles, (1, 2, 4), (4, 8), (3, 4))


def _tile_configs(problem: GemmProblem, sms: int, tiles: list, splits: tuple, warps: tuple, stages: tuple) -> list:
    """``gemm``'s configs over ``tiles``: tiles no larger than the problem needs, K slices of at least one K
    tile, enough programs to fill the GPU without splitting K where the tiles already do, and pipelines whose
    stages fit the shared memory."""
    rows, cols, k = problem.n, problem.m, problem.k
    operand_bytes = dtype_bytes(problem.a_type)
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
            found += [
                TritonConfig(r, c, bk, split, 8, w, s)
                for w in warps
                for s in stages
                if w * 32 * 2 <= r * c
                and (w > 2 or c == 32)  # two warps for the narrowest skinny tile alone
                and s * (r + c) * bk * operand_bytes <= SHARED_BYTES
            ]
    return found


def _swapped_configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """2-16 tokens: the ``swapped`` tile, 64 or 128 weight columns (4 warps per 64) over 128- or 256-long K
    tiles in 4 or 6 stages within the shared memory; 64-column tiles split K 2 or 4 ways where they leave
    half the SMs idle (on the decode projections measured, an unsplit tile won everywhere: docs/triton.md)."""
    operand_bytes = dtype_bytes(problem.a_type)
    found = []
    for c in SWAPPED_COLUMNS:
        output_tiles = -(-problem.m // c) * problem.batch
        splits = (1, 2, 4) if c == 64 and 2 * output_tiles <= sms else (1,)
        for bk in (128, 256):
            if bk > max(32, problem.k):
                continue
            found += [
                TritonConfig(SKINNY_ROWS, c, bk, split, 1, c // 16, s, "swapped")
                for split in splits
                if split == 1 or problem.k // split >= bk
                for s in (4, 6)
                if s * (SKINNY_ROWS + c) * bk * operand_bytes <= SHARED_BYTES
            ]
    return found


def _gemv_configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """One token without the ``literal`` kernel: 4-16 columns per program over 256-1024 of K, K split where the
    column blocks alone leave the GPU short of programs."""
    found = []
    for c in (4, 8, 16):
        programs = -(-problem.m // c) * problem.batch
        for bk in (256, 512, 1024):
            if bk > max(256, problem.k):
                continue
            for split in (1, 2, 4, 8):
                if split > 1 and (problem.k // split < bk or programs >= 2 * sms):
                    continue
                found += [TritonConfig(1, c, bk, split, 1, w, 1) for w in (4, 8) if c * bk >= w * 32 * 8]
    return found


def _literal_configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """The ``literal`` kernel's configs for one token (``410bb6e:bench/decode_floor.py``'s probe measured the same):
    one column a program (eight never won, docs/triton.md) over K slices of 512-4096, none longer than K's next
    power of two, 4-16 warps holding 2-32 elements a thread, one stage."""
    whole = 1 << (problem.k - 1).bit_length()
    return [
        TritonConfig(1, 1, bk, 1, 1, w, 1, "literal")
        for bk in (512, 2048, 4096)
        for w in (4, 8, 16)
        if bk <= whole and 2 * 32 * w <= bk <= 32 * 32 * w
    ]


@dataclass(frozen=True)
class Family:
    """A kernel family, one entry of ``FAMILIES``: the ``triton_kernels`` function that runs it (every one takes
    the same arguments), what its names end with (empty: its tile's rows tell it apart), whether it is offered
    for a problem on a GPU of so many SMs, its configs for that shape, and the token counts one of its winners
    computes right when only the count changes (``counts``: the least and the most, None for no bound; None
    itself where the kernel is compiled for one frame, its sizes literals: it serves its own count alone), and
    for such a family the one whose kernel runs the same configs over a range of counts (``ranged``). A new
    family is its kernel and one entry here."""

    kernel: str
    suffix: str
    offered: Callable[[GemmProblem, int], bool]
    configs: Callable[[GemmProblem, int], list[TritonConfig]]
    counts: tuple[int, int | None] | None
    ranged: str | None = None


ANY_COUNT = (1, None)  # ``gemm`` takes its sizes as arguments and masks its edges: any token count

FAMILIES: dict[str, Family] = {
    "gemv": Family("gemv", "", _one_token_gemv, _gemv_configs, (1, 1)),  # sizes as arguments, one row alone
    "literal": Family("gemv_literal", "_lit", _one_token_literal, _literal_configs, None),
    "skinny": Family("gemm", "", _two_to_sixteen, _skinny_configs, ANY_COUNT),
    "swapped": Family("swapped", "_swap", _two_to_sixteen, _swapped_configs, None, "swapped_range"),
    "swapped_range": Family("swapped_range", "_swr", _never, _swapped_configs, (1, SKINNY_ROWS)),  # R <= its rows
    "tiled": Family("gemm", "", _more_than_sixteen, _tiled_configs, ANY_COUNT),
}


def serves_range(solution: str, lo: int, hi: int) -> bool:
    """Whether a winner named ``solution`` computes right at every token count ``lo..hi`` of a bucket (an M
    grid's, docs/serving.md): a library's solution does (its own check at each count is Bench's, ``bucket_score``);
    one of these kernels where its family's kernel takes the sizes as arguments over those counts
    (``Family.counts``); an unreadable Triton name does not."""
    if not solution.startswith(PREFIX):
        return True
    try:
        counts = FAMILIES[config_from_name(solution).family].counts
    except ValueError:
        return False
    return counts is not None and counts[0] <= lo and (counts[1] is None or hi <= counts[1])


def ranged_twin(solution: str) -> TritonConfig | None:
    """The config of a winner named ``solution`` on the kernel of its family's ``ranged`` twin, which takes the
    token count as an argument and so may serve the winner's bucket (a swapped winner's ``swapped_range``:
    docs/triton.md, "Token counts a winner serves"); None where its family has none."""
    if not solution.startswith(PREFIX):
        return None
    try:
        config = config_from_name(solution)
    except ValueError:
        return None
    twin = FAMILIES[config.family].ranged
    return None if twin is None else replace(config, family=twin)


NAME = re.compile(PREFIX + r"r(\d+)c(\d+)k(\d+)_s(\d+)_g(\d+)_w(\d+)_st(\d+)(_[a-z]+)?")


def config_from_name(name: str) -> TritonConfig:
    """The config a row's solution name spells out (``TritonConfig.name``); ValueError if it is not one."""
    suffixes = {f.suffix: family for family, f in FAMILIES.items() if f.suffix}
    match = NAME.fullmatch(name)
    if match is None or (match[8] and match[8] not in suffixes):
        raise ValueError(
            f"{name!r} is not a Triton solution name (triton_r<R>c<C>k<K>_s<S>_g<G>_w<W>_st<N>, then "
            f"{', '.join(suffixes)} or neither)"
        )
    *sizes, suffix = match.groups()
    return TritonConfig(*map(int, sizes), family=suffixes.get(suffix or "", ""))
