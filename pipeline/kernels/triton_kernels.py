"""The Triton kernels of ``triton_gemm`` (its docstring says what they compute; docs/triton.md why so). Imported
by its launcher only: importing triton needs the ``cuda`` extra and costs a second."""

import triton
import triton.language as tl


@triton.jit
def gemm(x, y, out, bias, part, scale_x, scale_y, R, C, K, K_PER,
         sxb, sxr, sxk, syb, syk, syc, sob, sor, soc,
         HAS_BIAS: tl.constexpr, SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr,
         BC: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    pid, pk, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    n_r, n_c = tl.cdiv(R, BR), tl.cdiv(C, BC)
    width = GROUP * n_c  # GROUP row tiles side by side share their column tiles through L2
    first = (pid // width) * GROUP
    size = tl.minimum(n_r - first, GROUP)
    pr = first + (pid % width) % size
    pc = (pid % width) // size
    rows = pr * BR + tl.arange(0, BR)
    cols = pc * BC + tl.arange(0, BC)
    ks = tl.arange(0, BK)
    k0 = pk * K_PER
    k_end = tl.minimum(K, k0 + K_PER)
    # rows and columns past the edge load row (or column) r % R, in range: their sums are never stored, and no
    # load needs a mask but the last K tile's
    xp = x + b * sxb + (rows % R)[:, None] * sxr + (k0 + ks)[None, :] * sxk
    yp = y + b * syb + (k0 + ks)[:, None] * syk + (cols % C)[None, :] * syc
    acc = tl.zeros((BR, BC), dtype=tl.float32)
    for k in range(k0, k_end, BK):
        if EVEN_K:  # every K tile whole (K a multiple of BK): unmasked, vectorised loads
            a = tl.load(xp)
            w = tl.load(yp)
        else:
            kk = k + ks
            a = tl.load(xp, mask=kk[None, :] < k_end, other=0.0)
            w = tl.load(yp, mask=kk[:, None] < k_end, other=0.0)
        acc = tl.dot(a, w, acc)
        xp += BK * sxk
        yp += BK * syk
    inside = (rows[:, None] < R) & (cols[None, :] < C)
    if SCALED:  # tensorwise scales scale the product, before the bias (torch._scaled_mm's order)
        acc *= tl.load(scale_x) * tl.load(scale_y)
    if SPLIT == 1:
        if HAS_BIAS:
            acc += tl.load(bias + cols, mask=cols < C, other=0.0).to(tl.float32)[None, :]
        target = out + b * sob + rows[:, None] * sor + cols[None, :] * soc
        tl.store(target, acc.to(out.dtype.element_ty), mask=inside)
    else:
        tl.store(part + ((b * SPLIT + pk) * R + rows[:, None]) * C + cols[None, :], acc, mask=inside)


@triton.jit
def swapped(x, y, out, bias, part, scale_x, scale_y, R: tl.constexpr, C: tl.constexpr, K: tl.constexpr,
            K_PER: tl.constexpr, sxb: tl.constexpr, sxr: tl.constexpr, sxk: tl.constexpr, syb: tl.constexpr,
            syk: tl.constexpr, syc: tl.constexpr, sob: tl.constexpr, sor: tl.constexpr, soc: tl.constexpr,
            HAS_BIAS: tl.constexpr, SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr,
            BC: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    # the swapped tile compiled for one frame, every size and stride a literal (+0.5-2.2% on FP8 and the small
    # bf16 projections: docs/triton.md)
    swapped_tile(x, y, out, bias, part, scale_x, scale_y, R, C, K, K_PER, sxb, sxr, sxk, syb, syk, syc, sob, sor,
                 soc, HAS_BIAS, SCALED, SPLIT, BR, BC, BK, EVEN_K)  # fmt: skip


@triton.jit
def swapped_range(x, y, out, bias, part, scale_x, scale_y, R, C: tl.constexpr, K: tl.constexpr,
                  K_PER: tl.constexpr, sxb, sxr: tl.constexpr, sxk: tl.constexpr, syb: tl.constexpr,
                  syk: tl.constexpr, syc: tl.constexpr, sob, sor: tl.constexpr, soc: tl.constexpr,
                  HAS_BIAS: tl.constexpr, SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr,
                  BC: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    # the same tile over a range of token counts (R <= BR): the count and the batch strides that hold it are
    # arguments, the weight's sizes and strides literals as in ``swapped`` (docs/triton.md, "Token counts a
    # winner serves")
    swapped_tile(x, y, out, bias, part, scale_x, scale_y, R, C, K, K_PER, sxb, sxr, sxk, syb, syk, syc, sob, sor,
                 soc, HAS_BIAS, SCALED, SPLIT, BR, BC, BK, EVEN_K)  # fmt: skip


@triton.jit
def swapped_tile(x, y, out, bias, part, scale_x, scale_y, R, C, K, K_PER, sxb, sxr, sxk, syb, syk, syc, sob, sor,
                 soc, HAS_BIAS: tl.constexpr, SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr,
                 BC: tl.constexpr, BK: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    # gemm's skinny tile transposed (R <= BR, one row tile): a [BC, BR] tile of the output's transpose, the BC
    # (64 or 128) weight columns on the MMA's M side, where Hopper's warpgroup MMA takes them from shared memory,
    # and the tokens on its N side; gemm's parameters (GROUP unused), split-K partials in its layout. A size its
    # caller passes as a literal stays one here (Triton specialises a called function on its constant arguments)
    pc, pk, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    cols = pc * BC + tl.arange(0, BC)
    rows = tl.arange(0, BR)
    ks = tl.arange(0, BK)
    k0 = pk * K_PER
    k_end = tl.minimum(K, k0 + K_PER)
    yp = y + b * syb + (cols % C)[:, None] * syc + (k0 + ks)[None, :] * syk  # [BC, BK]
    xp = x + b * sxb + (k0 + ks)[:, None] * sxk + (rows % R)[None, :] * sxr  # [BK, BR]
    acc = tl.zeros((BC, BR), dtype=tl.float32)
    for k in range(k0, k_end, BK):
        if EVEN_K:  # gemv's load policies: the weights stream through once, every program reads the activation
            w = tl.load(yp, eviction_policy="evict_first")
            a = tl.load(xp, eviction_policy="evict_last")
        else:
            kk = k + ks
            w = tl.load(yp, eviction_policy="evict_first", mask=kk[None, :] < k_end, other=0.0)
            a = tl.load(xp, eviction_policy="evict_last", mask=kk[:, None] < k_end, other=0.0)
        acc = tl.dot(w, a, acc)
        yp += BK * syk
        xp += BK * sxk
    inside = (cols[:, None] < C) & (rows[None, :] < R)
    if SCALED:
        acc *= tl.load(scale_x) * tl.load(scale_y)
    if SPLIT == 1:
        if HAS_BIAS:
            acc += tl.load(bias + cols, mask=cols < C, other=0.0).to(tl.float32)[:, None]
        target = out + b * sob + rows[None, :] * sor + cols[:, None] * soc
        tl.store(target, acc.to(out.dtype.element_ty), mask=inside)
    else:
        tl.store(part + ((b * SPLIT + pk) * R + rows[None, :]) * C + cols[:, None], acc, mask=inside)


@triton.jit
def gemv(x, y, out, bias, part, scale_x, scale_y, R, C, K, K_PER,
         sxb, sxr, sxk, syb, syk, syc, sob, sor, soc,
         HAS_BIAS: tl.constexpr, SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr,
         BC: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    # one token (R == 1, BR == 1): gemm's parameters, no tl.dot (whose least tile side is 16 rows); a program
    # reduces BC columns over one K slice, products summed elementwise in fp32 and across K once at the end
    pc, pk, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    cols = pc * BC + tl.arange(0, BC)
    ks = tl.arange(0, BK)
    k0 = pk * K_PER
    k_end = tl.minimum(K, k0 + K_PER)
    xp = x + b * sxb + (k0 + ks) * sxk
    yp = y + b * syb + (k0 + ks)[None, :] * syk + (cols % C)[:, None] * syc  # [BC, BK]: along K per column
    acc = tl.zeros((BC, BK), dtype=tl.float32)
    for k in range(k0, k_end, BK):
        if EVEN_K:  # the weights stream through once, the activation is every program's: docs/triton.md
            a = tl.load(xp, eviction_policy="evict_last")
            w = tl.load(yp, eviction_policy="evict_first")
        else:
            kk = k + ks
            a = tl.load(xp, eviction_policy="evict_last", mask=kk < k_end, other=0.0)
            w = tl.load(yp, eviction_policy="evict_first", mask=kk[None, :] < k_end, other=0.0)
        acc += w.to(tl.float32) * a.to(tl.float32)[None, :]
        xp += BK * sxk
        yp += BK * syk
    total = tl.sum(acc, axis=1)
    inside = cols < C
    if SCALED:
        total *= tl.load(scale_x) * tl.load(scale_y)
    if SPLIT == 1:
        if HAS_BIAS:
            total += tl.load(bias + cols, mask=inside, other=0.0).to(tl.float32)
        tl.store(out + b * sob + cols * soc, total.to(out.dtype.element_ty), mask=inside)
    else:
        tl.store(part + (b * SPLIT + pk) * C + cols, total, mask=inside)


@triton.jit
def gemv_literal(x, y, out, bias, part, scale_x, scale_y, R: tl.constexpr, C: tl.constexpr, K: tl.constexpr,
                 K_PER: tl.constexpr, sxb: tl.constexpr, sxr: tl.constexpr, sxk: tl.constexpr, syb: tl.constexpr,
                 syk: tl.constexpr, syc: tl.constexpr, sob: tl.constexpr, sor: tl.constexpr, soc: tl.constexpr,
                 HAS_BIAS: tl.constexpr, SCALED: tl.constexpr, SPLIT: tl.constexpr, BR: tl.constexpr,
                 BC: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    # one token, compiled for one frame: every size and stride a literal, as Inductor's kernels take them
    # (docs/triton.md, "Literal sizes"); BC columns a program over the whole of K in BK-long masked slices,
    # products summed elementwise in fp32 and across K once; no split (SPLIT, K_PER, R, sxr, sor, GROUP unused)
    pc, b = tl.program_id(0), tl.program_id(2)
    cols = pc * BC + tl.arange(0, BC)[:, None]
    inside = cols < C
    ks = tl.arange(0, BK)[None, :]
    acc = tl.zeros((BC, BK), dtype=tl.float32)
    for k in tl.range(0, K, BK):
        kk = k + ks
        a = tl.load(x + b * sxb + kk * sxk, mask=kk < K, eviction_policy="evict_last", other=0.0)
        w = tl.load(y + b * syb + kk * syk + cols * syc, mask=(kk < K) & inside, eviction_policy="evict_first",
                    other=0.0)  # fmt: skip
        acc = tl.where((kk < K) & inside, acc + a.to(tl.float32) * w.to(tl.float32), acc)
    total = tl.sum(acc, axis=1)[:, None]
    if SCALED:
        total *= tl.load(scale_x) * tl.load(scale_y)
    if HAS_BIAS:
        total += tl.load(bias + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(out + b * sob + cols * soc, total.to(out.dtype.element_ty), mask=inside)


@triton.jit
def reduce(part, out, bias, R, C, sob, sor, soc,
           HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    pid, b = tl.program_id(0), tl.program_id(1)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    inside = offs < R * C
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT):  # a fixed order: the same sum on every run
        acc += tl.load(part + (b * SPLIT + s) * R * C + offs, mask=inside, other=0.0)
    r, c = offs // C, offs % C
    if HAS_BIAS:
        acc += tl.load(bias + c, mask=inside, other=0.0).to(tl.float32)
    tl.store(out + b * sob + r * sor + c * soc, acc.to(out.dtype.element_ty), mask=inside)
