"""What one launch that reads B bytes reaches, decode_hbm.py's floor at a GEMM's size: a kernel that moves B bytes
cannot start, ramp up and drain faster than one that only reads them, so the read's fraction of the HBM limit is
what "fraction of the limit" can mean at that size (docs/decisions.md, "What can one launch of B bytes reach?").

A helper of ``decode_hbm.py`` (imported from the script's directory), not a benchmark of its own.
"""

from __future__ import annotations

import statistics

import triton
import triton.language as tl

PROGRAMS = (528, 1056, 2112, 4224)  # program counts the read is tried with (4, 8, 16 and 32 per SM of an H100)


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


def timed(candidates: dict, sets: list, rounds: int) -> dict[str, float]:
    """Median microseconds per call of each candidate, its calls captured in a CUDA graph over ``sets``
    (``GraphTimer``), replays interleaved (forward, then backward) over ``rounds``; a candidate that fails to
    compile or capture is left out, as Triton's autotuner scores such a config infinite time."""
    from pipeline.api import GraphTimer, TimingSettings

    timers = {}
    for name, launch in candidates.items():
        try:
            timers[name] = GraphTimer(launch, sets, TimingSettings())
        except Exception:  # any compile or launch failure
            continue
    samples = {name: [] for name in timers}
    names = list(timers)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            samples[name].append(timers[name].sample())
    return {name: statistics.median(v) for name, v in samples.items()}


def read_floor(size: int, device, limit: float, programs=PROGRAMS) -> dict:
    """The best streaming read of ``size`` bytes (``read`` over block sizes, program counts and warps), a copy of
    ``size`` bytes and one of half as many, over rotating buffers together more than 3x the L2; each as a
    fraction of ``limit`` (bytes/s) by the bytes it moves."""
    import torch

    from pipeline.api import TimingSettings, copies_of, l2_bytes

    copies = copies_of(size, l2_bytes(device), TimingSettings().l2_factor)
    srcs = [torch.empty(size, dtype=torch.uint8, device=device).random_() for _ in range(copies)]
    dsts = [torch.empty_like(s) for s in srcs]
    sums = torch.empty(1 << 16, dtype=torch.int32, device=device)
    half, words = size // 2, size // 4
    candidates = {"copy": lambda i: dsts[i].copy_(srcs[i]), "copy_half": lambda i: dsts[i][:half].copy_(srcs[i][:half])}
    for block in (1024, 2048, 4096):
        for count in programs:
            per = triton.cdiv(triton.cdiv(words, count), block) * block
            for warps in (4, 8):
                candidates[f"read_b{block}_p{count}_w{warps}"] = lambda i, b=block, p=per, w=warps: read[
                    (triton.cdiv(words, p),)
                ](srcs[i].view(torch.int32), sums, words, b, p, num_warps=w)
    us = timed(candidates, list(range(copies)), 7)
    read_us, read_config = min((t, n) for n, t in us.items() if n.startswith("read"))
    return {
        "bytes": size, "copy_us": us["copy"], "copy_frac": 2 * size / limit / us["copy"] * 1e6,
        "copy_half_frac": size / limit / us["copy_half"] * 1e6, "read_us": read_us, "read_config": read_config,
        "read_frac": size / limit / read_us * 1e6,
    }  # fmt: skip
