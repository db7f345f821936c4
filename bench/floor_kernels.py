"""Triton kernels of ``decode_floor.py`` alone (not the product's): a streaming read, the product's GEMM (its
skinny, one-token and swapped tiles) with split-K reduced inside the one launch, its tiles loading through tensor
descriptors, its one-token kernel for several rows (``gemv_rows``), its swapped tile on a persistent grid.
Imported by that script's ``measure``; needs triton."""

import triton
import triton.language as tl


@triton.jit
def read(src, out, n, BLOCK: tl.constexpr, PER: tl.constexpr):
    # program p sums int32 words [p * PER, (p + 1) * PER) of src, BLOCK at a time: every byte read once
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    base = pid * PER
    for i in range(0, PER, BLOCK):
        acc += tl.load(src + base + i + offs, mask=base + i + offs < n, other=0)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def _sum_slices_at_the_last(acc, slots, slice_size, pk, inside, counter, outs, scale_x, scale_y,
                            SCALED: tl.constexpr, SPLIT: tl.constexpr):  # fmt: skip
    # split-K reduced in the launch: slice pk stores its fp32 partial at slots + pk * slice_size, and the slice
    # that arrives last at the tile's counter adds all partials in slice order (the reduction kernel's order:
    # the same sum whichever slice arrives last), writes them to outs and resets the counter
    tl.store(slots + pk * slice_size, acc, mask=inside)
    tl.debug_barrier()
    if tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == SPLIT - 1:
        total = tl.zeros_like(acc)
        for s in tl.static_range(SPLIT):
            total += tl.load(slots + s * slice_size, mask=inside, other=0.0, cache_modifier=".cg")
        if SCALED:
            total *= tl.load(scale_x) * tl.load(scale_y)
        tl.store(outs, total.to(outs.dtype.element_ty), mask=inside)
        tl.atomic_xchg(counter, 0)


@triton.jit
def gemm_fixup(x, y, out, part, count, scale_x, scale_y, R, C, K, K_PER, sxr, sxk, syk, syc, sor, soc,
               SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
               BK: tl.constexpr):  # fmt: skip
    # the product's skinny/tiled tile (triton_kernels.gemm, K a multiple of BK) with split-K reduced in the
    # same launch (_sum_slices_at_the_last)
    pid, pk = tl.program_id(0), tl.program_id(1)
    n_c = tl.cdiv(C, BC)
    rows = (pid // n_c) * BR + tl.arange(0, BR)
    cols = (pid % n_c) * BC + tl.arange(0, BC)
    ks = tl.arange(0, BK)
    k0 = pk * K_PER
    k_end = tl.minimum(K, k0 + K_PER)
    xp = x + (rows % R)[:, None] * sxr + (k0 + ks)[None, :] * sxk
    yp = y + (k0 + ks)[:, None] * syk + (cols % C)[None, :] * syc
    acc = tl.zeros((BR, BC), dtype=tl.float32)
    for _ in range(k0, k_end, BK):
        acc = tl.dot(tl.load(xp), tl.load(yp), acc)
        xp += BK * sxk
        yp += BK * syk
    inside = (rows[:, None] < R) & (cols[None, :] < C)
    _sum_slices_at_the_last(
        acc,
        part + rows[:, None] * C + cols[None, :],
        R * C,
        pk,
        inside,
        count + pid,
        out + rows[:, None] * sor + cols[None, :] * soc,
        scale_x,
        scale_y,
        SCALED,
        SPLIT,
    )


@triton.jit
def gemv_fixup(x, y, out, part, count, scale_x, scale_y, R, C, K, K_PER, sxr, sxk, syk, syc, sor, soc,
               SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
               BK: tl.constexpr):  # fmt: skip
    # the product's one-token kernel (triton_kernels.gemv, K a multiple of BK), split-K reduced as gemm_fixup
    pc, pk = tl.program_id(0), tl.program_id(1)
    cols = pc * BC + tl.arange(0, BC)
    ks = tl.arange(0, BK)
    k0 = pk * K_PER
    k_end = tl.minimum(K, k0 + K_PER)
    xp = x + (k0 + ks) * sxk
    yp = y + (k0 + ks)[None, :] * syk + (cols % C)[:, None] * syc
    acc = tl.zeros((BC, BK), dtype=tl.float32)
    for _ in range(k0, k_end, BK):
        acc += tl.load(yp).to(tl.float32) * tl.load(xp).to(tl.float32)[None, :]
        xp += BK * sxk
        yp += BK * syk
    inside = cols < C
    _sum_slices_at_the_last(
        tl.sum(acc, axis=1), part + cols, C, pk, inside, count + pc, out + cols * soc, scale_x, scale_y, SCALED, SPLIT
    )


@triton.jit
def skinny_tma(x_desc, w_desc, out, scale_x, scale_y, R, C, K, sor,
               SCALED: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr):  # fmt: skip
    # the product's skinny tile (one BR-row tile holds every token) with both operands loaded through tensor
    # descriptors (Hopper's TMA: one bulk copy per tile, rows past R zero-filled), W read as [BC, BK] along K
    pc = tl.program_id(0)
    acc = tl.zeros((BR, BC), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(x_desc.load([0, k]), w_desc.load([pc * BC, k]).T, acc)
    if SCALED:
        acc *= tl.load(scale_x) * tl.load(scale_y)
    rows = tl.arange(0, BR)
    cols = pc * BC + tl.arange(0, BC)
    tl.store(out + rows[:, None] * sor + cols[None, :], acc.to(out.dtype.element_ty),
             mask=(rows[:, None] < R) & (cols[None, :] < C))  # fmt: skip


@triton.jit
def gemv_tma(x, w_desc, out, scale_x, scale_y, C, K,
             SCALED: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr):  # fmt: skip
    # the product's one-token kernel with the weight tile [BC, BK] loaded through a tensor descriptor
    pc = tl.program_id(0)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BC, BK), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += w_desc.load([pc * BC, k]).to(tl.float32) * tl.load(x + k + ks).to(tl.float32)[None, :]
    total = tl.sum(acc, axis=1)
    if SCALED:
        total *= tl.load(scale_x) * tl.load(scale_y)
    cols = pc * BC + tl.arange(0, BC)
    tl.store(out + cols, total.to(out.dtype.element_ty), mask=cols < C)


@triton.jit
def _rows_by_tiles(x, y, out, scale_x, scale_y, R, C, K, sxr, sxk, syk, syc, sor, soc, SCALED: tl.constexpr,
                   BR: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, POLICIES: tl.constexpr):  # fmt: skip
    # the product's one-token kernel (triton_kernels.gemv; K a multiple of BK, no split) for up to BR > 1 token
    # rows at once: a program loads each [BC, BK] weight tile once and multiplies it by every row elementwise
    # into a [BR, BC, BK] fp32 accumulator, no tl.dot; POLICIES: the one-token kernels' load policies (the
    # weights stream through once, the token rows are every program's)
    pc = tl.program_id(0)
    cols = pc * BC + tl.arange(0, BC)
    ks = tl.arange(0, BK)
    rows = tl.arange(0, BR)
    xp = x + (rows % R)[:, None, None] * sxr + ks[None, None, :] * sxk  # [BR, 1, BK]
    yp = y + ks[None, None, :] * syk + (cols % C)[None, :, None] * syc  # [1, BC, BK]
    acc = tl.zeros((BR, BC, BK), dtype=tl.float32)
    for _ in range(0, K, BK):
        if POLICIES:
            w = tl.load(yp, eviction_policy="evict_first")
            a = tl.load(xp, eviction_policy="evict_last")
        else:
            w = tl.load(yp)
            a = tl.load(xp)
        acc += w.to(tl.float32) * a.to(tl.float32)
        xp += BK * sxk
        yp += BK * syk
    total = tl.sum(acc, axis=2)  # [BR, BC]
    if SCALED:
        total *= tl.load(scale_x) * tl.load(scale_y)
    inside = (rows[:, None] < R) & (cols[None, :] < C)
    tl.store(out + rows[:, None] * sor + cols[None, :] * soc, total.to(out.dtype.element_ty), mask=inside)


@triton.jit
def gemv_rows(x, y, out, scale_x, scale_y, R, C, K, sxr, sxk, syk, syc, sor, soc,
              SCALED: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr):  # fmt: skip
    # _rows_by_tiles with its sizes and strides arguments, loads without policies
    _rows_by_tiles(x, y, out, scale_x, scale_y, R, C, K, sxr, sxk, syk, syc, sor, soc, SCALED, BR, BC, BK, False)


@triton.jit
def gemv_rows_literal(x, y, out, scale_x, scale_y, R: tl.constexpr, C: tl.constexpr, K: tl.constexpr,
                      sxr: tl.constexpr, sxk: tl.constexpr, syk: tl.constexpr, syc: tl.constexpr, sor: tl.constexpr,
                      soc: tl.constexpr, SCALED: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
                      BK: tl.constexpr):  # fmt: skip
    # _rows_by_tiles compiled for one frame (every size and stride a literal, as the product's one-token literal
    # kernel), its loads with the one-token kernels' policies
    _rows_by_tiles(x, y, out, scale_x, scale_y, R, C, K, sxr, sxk, syk, syc, sor, soc, SCALED, BR, BC, BK, True)


@triton.jit
def swapped_persistent(x, y, out, scale_x, scale_y, R, C, K, sxr, sxk, syk, syc, sor, soc,
                       SCALED: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                       PROGRAMS: tl.constexpr):  # fmt: skip
    # the product's swapped tile (triton_kernels.swapped; K a multiple of BK, no split) on a persistent grid:
    # PROGRAMS programs take the column tiles in turn, over one flat loop of (tile, K tile) steps, so the
    # software pipeline runs on from one tile into the next instead of draining at each tile's end
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(C, BC)
    k_tiles = K // BK
    mine = (n_tiles - pid + PROGRAMS - 1) // PROGRAMS
    rows = tl.arange(0, BR)
    ks = tl.arange(0, BK)
    tile = pid - PROGRAMS
    ki = -1
    cols = tl.arange(0, BC)
    acc = tl.zeros((BC, BR), dtype=tl.float32)
    for _ in range(0, mine * k_tiles):
        ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
        if ki == 0:
            tile = tile + PROGRAMS
            cols = tile * BC + tl.arange(0, BC)
        k = ki * BK
        w = tl.load(y + (cols % C)[:, None] * syc + (k + ks)[None, :] * syk, eviction_policy="evict_first")
        a = tl.load(x + (k + ks)[:, None] * sxk + (rows % R)[None, :] * sxr, eviction_policy="evict_last")
        acc = tl.dot(w, a, acc)
        if ki == k_tiles - 1:
            res = acc
            if SCALED:
                res = res * (tl.load(scale_x) * tl.load(scale_y))
            inside = (cols[:, None] < C) & (rows[None, :] < R)
            tl.store(out + rows[None, :] * sor + cols[:, None] * soc, res.to(out.dtype.element_ty), mask=inside)
            acc = tl.zeros((BC, BR), dtype=tl.float32)


@triton.jit
def swapped_flat(x, y, out, scale_x, scale_y, R, C, K, sxr, sxk, syk, syc, sor, soc,
                 SCALED: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                 PROGRAMS: tl.constexpr):  # fmt: skip
    # swapped_persistent written as two loops that Triton's pipeliner flattens (``tl.range(flatten=True)``)
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(C, BC)
    rows = tl.arange(0, BR)
    ks = tl.arange(0, BK)
    for tile in tl.range(pid, n_tiles, PROGRAMS, flatten=True):
        cols = tile * BC + tl.arange(0, BC)
        acc = tl.zeros((BC, BR), dtype=tl.float32)
        for k in range(0, K, BK):
            w = tl.load(y + (cols % C)[:, None] * syc + (k + ks)[None, :] * syk, eviction_policy="evict_first")
            a = tl.load(x + (k + ks)[:, None] * sxk + (rows % R)[None, :] * sxr, eviction_policy="evict_last")
            acc = tl.dot(w, a, acc)
        if SCALED:
            acc = acc * (tl.load(scale_x) * tl.load(scale_y))
        inside = (cols[:, None] < C) & (rows[None, :] < R)
        tl.store(out + rows[None, :] * sor + cols[:, None] * soc, acc.to(out.dtype.element_ty), mask=inside)


@triton.jit
def swapped_fixup(x, y, out, part, count, scale_x, scale_y, R, C, K, K_PER, sxr, sxk, syk, syc, sor, soc,
                  SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
                  BK: tl.constexpr):  # fmt: skip
    # the product's swapped tile (triton_kernels.swapped; each K slice whole K tiles) with split-K reduced in
    # the same launch (_sum_slices_at_the_last)
    pc, pk = tl.program_id(0), tl.program_id(1)
    cols = pc * BC + tl.arange(0, BC)
    rows = tl.arange(0, BR)
    ks = tl.arange(0, BK)
    k0 = pk * K_PER
    k_end = tl.minimum(K, k0 + K_PER)
    yp = y + (cols % C)[:, None] * syc + (k0 + ks)[None, :] * syk
    xp = x + (k0 + ks)[:, None] * sxk + (rows % R)[None, :] * sxr
    acc = tl.zeros((BC, BR), dtype=tl.float32)
    for _ in range(k0, k_end, BK):
        w = tl.load(yp, eviction_policy="evict_first")
        a = tl.load(xp, eviction_policy="evict_last")
        acc = tl.dot(w, a, acc)
        yp += BK * syk
        xp += BK * sxk
    inside = (cols[:, None] < C) & (rows[None, :] < R)
    _sum_slices_at_the_last(
        acc,
        part + rows[None, :] * C + cols[:, None],
        R * C,
        pk,
        inside,
        count + pc,
        out + rows[None, :] * sor + cols[:, None] * soc,
        scale_x,
        scale_y,
        SCALED,
        SPLIT,
    )


@triton.jit
def _gemv_rows_masked(x, y, out, scale_x, scale_y, C, K, SCALED: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    # one token: XB weight rows (output columns) a program, each reduced over K in RB-long masked slices, products
    # summed elementwise in fp32 and across K once (the tiling of Inductor's reduction kernel for a one-row
    # F.linear); y is the weights row-major [C, K], x the token [K], out [C]
    cols = tl.program_id(0) * XB + tl.arange(0, XB)[:, None]
    inside = cols < C
    ks = tl.arange(0, RB)[None, :]
    acc = tl.zeros((XB, RB), dtype=tl.float32)
    for k in tl.range(0, K, RB):
        kk = k + ks
        a = tl.load(x + kk, mask=kk < K, eviction_policy="evict_last", other=0.0).to(tl.float32)
        w = tl.load(y + kk + K * cols, mask=(kk < K) & inside, eviction_policy="evict_first", other=0.0)
        acc = tl.where((kk < K) & inside, acc + a * w.to(tl.float32), acc)
    total = tl.sum(acc, 1)[:, None]
    if SCALED:
        total *= tl.load(scale_x) * tl.load(scale_y)
    tl.store(out + cols, total.to(out.dtype.element_ty), mask=inside)


@triton.jit
def gemv_literal(x, y, out, scale_x, scale_y, C: tl.constexpr, K: tl.constexpr,
                 SCALED: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):  # fmt: skip
    # _gemv_rows_masked compiled for one shape: C and K literals, as Inductor's kernels take every size
    _gemv_rows_masked(x, y, out, scale_x, scale_y, C, K, SCALED, XB, RB)


@triton.jit
def gemv_sized(x, y, out, scale_x, scale_y, C, K, SCALED: tl.constexpr, XB: tl.constexpr, RB: tl.constexpr):
    # _gemv_rows_masked with C and K arguments (only their divisibility by 16 specialised, as Triton does)
    _gemv_rows_masked(x, y, out, scale_x, scale_y, C, K, SCALED, XB, RB)
