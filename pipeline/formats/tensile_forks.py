"""Which forks of a TensileLite config the tree keeps: its solution-validity rules for what our presets fork.

TensileLite enumerates every combination of a config's ``ForkParameters`` and throws away, one ``Solution`` at a
time, those its rules reject; a config whose every fork is thrown away ends the run ("0 valid solutions"). The
presets fork ``MatrixInstruction`` and ``DepthU`` (with ``WorkGroupMapping`` and ``GlobalSplitU``, which no rule
below reads) and leave every other parameter at its default, so three rules decide (docs/upstream.md,
"TensileLite fork validity", with the file and line of each):

- ``LoopIters``: ``DepthU // MI_K >= 1``;
- stagger: ``DepthU * bytes <= StaggerUStride`` (256; any DepthU with ``StaggerU`` 0, which clears the stride);
- LDS: the two operand tiles, padded as TensileLite pads them (the pad depends on the local-read and
  global-read vector widths it derives), doubled by the prefetch buffer and rounded up to a power of two
  (``1LDSBuffer`` 0, the default), or once each (``1LDSBuffer`` 1: the prefetch shares the one buffer), within the
  arch's LDS (64 KiB; gfx950 160 KiB in the 2025 tree); ``1LDSBuffer`` 1 needs a global-read prefetch.

``fork_refusal`` ports those derivations for MFMA instructions with wave 64 and the defaults, and names the rule
that refuses a fork; ``tests/test_tensile_forks.py`` checks it against a real tree where one is at hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# DataType letter -> bytes per element (TensileLite's DataType.numBytes); every FP8 letter is one byte.
ELEMENT_BYTES = {"h": 2, "b": 2, "s": 4, "d": 8}
STAGGER_U, STAGGER_U_STRIDE = 32, 256  # Common.py defaultBenchmarkCommonParameters StaggerU, StaggerUStride
WAVEFRONT = 64
OCCUPANCY_LDS = 65536 // 40  # DeviceLDS // MaxOccupancy (40), the least LDS a kernel is given
# Bytes of LDS a kernel may use, per tree and arch (S24 Common.py MaxLDS; 2025: rocisa initArchCaps DeviceLDS).
ARCH_LDS = {
    "2024": {"gfx90a": 65536, "gfx942": 65536},
    "2025": {"gfx90a": 65536, "gfx942": 65536, "gfx950": 163840},
}


@dataclass(frozen=True)
class _Side:
    """One operand's tile as TensileLite lays it in LDS."""

    macro_tile: int
    vector_width: int
    unroll_major: bool


def element_bytes(data_type: str) -> int:
    return ELEMENT_BYTES.get(data_type, 1)


def fork_refusal(
    data_type: str,
    trans_a: bool,
    trans_b: bool,
    instruction: Sequence[int],
    depth_u: int,
    lds_limit: int,
    prefetch_global_read: bool = True,
    one_lds_buffer: bool = False,
    stagger_u: int = STAGGER_U,
    stagger_u_stride: int = STAGGER_U_STRIDE,
) -> str | None:
    """Why TensileLite rejects this fork (its message), or None when it keeps it. ``instruction``: a
    MatrixInstruction row [MI_M, MI_N, MI_K, MI_B, MIBlockM, WaveTileM, WaveTileN, WaveGroupM, WaveGroupN]."""
    mi_m, mi_n, mi_k, mi_b, block_m, wave_tile_m, wave_tile_n, group_m, group_n = instruction
    bpe = element_bytes(data_type)
    if depth_u // mi_k < 1:
        return "LoopIters need to greater than 0"
    stride = 0 if stagger_u == 0 else depth_u * bpe if stagger_u_stride == -1 else stagger_u_stride
    if stride and math.ceil(math.log2(stride / (depth_u * bpe))) < 0:  # StaggerU 0: no stride, no rule
        return f"StaggerUStride={stride} is less than size of DepthU={depth_u} * BytesPerElement={bpe}"
    threads = group_m * group_n * WAVEFRONT
    input_per_thread = mi_m * mi_k * mi_b // WAVEFRONT
    lead_unroll_a, lead_unroll_b = not trans_a, trans_b  # TLUA, TLUB
    transpose_lds = not (lead_unroll_a and lead_unroll_b)
    a = _Side(mi_m * block_m * wave_tile_m * group_m, _vector_width(wave_tile_m, bpe), transpose_lds and trans_a)
    b = _Side(mi_n * wave_tile_n * group_n, _vector_width(wave_tile_n, bpe), transpose_lds and not trans_b)
    sixteen = mi_m == 16 and mi_b == 1
    lrvw = 16 // bpe if transpose_lds else input_per_thread
    if lrvw // input_per_thread > 1 and depth_u // mi_k <= lrvw // input_per_thread:
        lrvw //= 2
    if lrvw // input_per_thread > 1:
        aligned = [_tile_bytes(s, depth_u, bpe, lrvw, None, sixteen)[1] for s in (a, b)]
        if sum(aligned) > lds_limit:
            lrvw //= 2
    grvw = [_global_read_width(s, depth_u, bpe, lrvw, threads) for s in (a, b)]
    (_, aligned_a), (bytes_b, aligned_b) = (
        _tile_bytes(s, depth_u, bpe, lrvw, g, sixteen) for s, g in zip((a, b), grvw, strict=True)
    )
    if one_lds_buffer:
        total = aligned_a + aligned_b
    elif prefetch_global_read:
        total = _next_power_of_two(aligned_a + aligned_b) + aligned_a + bytes_b
    else:
        total = aligned_a + bytes_b
    total = max(total, OCCUPANCY_LDS)
    if total > lds_limit:  # checked after the buffer rule: its message is the tree's last
        return f"Kernel Uses {total} > {lds_limit} bytes of LDS"
    if one_lds_buffer and not prefetch_global_read:
        return "PGR=0 already use 1 LDS buffer only"
    return None


def _vector_width(wave_tile: int, bpe: int) -> int:
    width = 16 // bpe
    while wave_tile % width:
        width //= 2
    return width


def _global_read_width(side: _Side, depth_u: int, bpe: int, lrvw: int, threads: int) -> int:
    best = min(lrvw if side.unroll_major else 16 // bpe, 16 // bpe)
    width, chosen = 1, 1
    while width <= best:
        if (side.macro_tile * depth_u // threads) % width == 0:
            chosen = width
        width *= 2
    return chosen


def _tile_bytes(side: _Side, depth_u: int, bpe: int, lrvw: int, grvw: int | None, sixteen: bool) -> tuple[int, int]:
    """(bytes, bytes aligned) of one operand's LDS tile; ``grvw`` None: before the global-read width is chosen."""
    opt_pad = lrvw * (2 if sixteen and lrvw * bpe // 4 in (1, 4) else 1)
    if side.unroll_major:
        pad = max(grvw or 0, opt_pad)
        block = _round_up(depth_u * bpe, 128)
        if depth_u * bpe * side.vector_width > 128:
            block = _round_up(depth_u * bpe * side.vector_width, 128)
    else:
        pad = ((16 * side.vector_width * bpe + side.macro_tile * bpe * lrvw) % 128) // bpe if sixteen else 0
        if grvw is not None and grvw * bpe == 32 and pad == 0:
            pad = 16 // bpe
        block = side.macro_tile * bpe * lrvw if sixteen else 0
    if grvw is not None and grvw * bpe == 32 and pad == 16 // bpe:
        block = 128
    if block:
        size = int(depth_u * side.macro_tile * bpe / block * (block + pad * bpe))
    elif side.unroll_major:
        size = (depth_u + pad) * side.macro_tile * bpe
    else:
        size = depth_u * (side.macro_tile + pad) * bpe
    return size, _round_up(size, 256 // bpe)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _next_power_of_two(value: int) -> int:
    return 1 << (value - 1).bit_length() if value > 0 else 0


@dataclass(frozen=True)
class ForkPlan:
    """The (MatrixInstruction, DepthU) pairs a config forks, and those pruned with TensileLite's reason."""

    kept: list[dict]
    pruned: list[tuple[dict, str]]

    def total(self) -> int:
        return len(self.kept) + len(self.pruned)

    def lines(self) -> list[str]:
        """One line per pruned fork group: the group and TensileLite's reason."""
        return [
            f"{pair['MatrixInstruction']} DepthU {pair['DepthU']}"
            + (f" 1LDSBuffer {pair['1LDSBuffer']}" if "1LDSBuffer" in pair else "")
            + f": {why}"
            for pair, why in self.pruned
        ]


def plan_forks(
    data_type: str,
    trans_a: bool,
    trans_b: bool,
    instructions: Sequence[Sequence[int]],
    depth_us: Sequence[int],
    lds_limit: int,
    prefetch_global_reads: Sequence[bool] = (True,),
    one_lds_buffers: Sequence[int] | None = None,
) -> ForkPlan:
    """Every (instruction, DepthU[, 1LDSBuffer]) group (``1LDSBuffer`` where the preset forks it), split into those
    TensileLite keeps under each PrefetchGlobalRead the config sets and those it would reject (``plan_groups``)."""
    groups = [
        {"MatrixInstruction": list(instruction), "DepthU": depth_u} | ({} if one is None else {"1LDSBuffer": one})
        for instruction in instructions
        for depth_u in depth_us
        for one in (one_lds_buffers if one_lds_buffers is not None else (None,))
    ]
    return plan_groups(data_type, trans_a, trans_b, groups, lds_limit, prefetch_global_reads)


def plan_groups(
    data_type: str,
    trans_a: bool,
    trans_b: bool,
    groups: Sequence[dict],
    lds_limit: int,
    prefetch_global_reads: Sequence[bool] = (True,),
) -> ForkPlan:
    """A preset's explicit fork groups (each a MatrixInstruction with its DepthU and, where set, 1LDSBuffer,
    StaggerU and StaggerUStride: a tile as upstream's logic ships it), split as ``plan_forks`` splits pairs."""
    kept, pruned = [], []
    for group in groups:
        reasons = (
            fork_refusal(
                data_type,
                trans_a,
                trans_b,
                group["MatrixInstruction"],
                group["DepthU"],
                lds_limit,
                prefetch,
                bool(group.get("1LDSBuffer", 0)),
                group.get("StaggerU", STAGGER_U),
                group.get("StaggerUStride", STAGGER_U_STRIDE),
            )
            for prefetch in prefetch_global_reads
        )
        why = next((r for r in reasons if r), None)
        (pruned.append((dict(group), why)) if why else kept.append(dict(group)))
    return ForkPlan(kept, pruned)


def lds_limit(arch: str, generation: str) -> int:
    """Bytes of LDS a kernel of ``arch`` may use in the ``generation`` tree."""
    return ARCH_LDS[generation][arch]
