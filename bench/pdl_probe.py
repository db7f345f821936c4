"""Would programmatic dependent launch (PDL) lift a one-token decode GEMM toward #36's HBM limit, where the
workload runs it? A probe, not the product: a one-column-per-program GEMV of the product's shape
(``triton_kernels.gemv`` with one column and no split) in three forms, against torch's default call:

- ``gemv``: launched as now;
- ``pdl``: launched with PDL (Triton's ``launch_pdl``), each program allowing the next kernel to launch at once
  (``gdc_launch_dependents``) and waiting for the kernel before it (``gdc_wait``) before its first load;
- ``pdl_prefetch``: the same, its first weight tile loaded before the wait (weights never depend on the
  kernel before; the activation does).

Two settings, each a CUDA graph of 48 calls over rotating weights (together more than 3x the L2), medians of 9
interleaved replays: ``chain``, the GEMM after itself (``decode_hbm.py``'s setting), and ``after_copy``, each GEMM
after a copy kernel that writes its activation (as a decode step's norm or activation does: a kernel launched
without PDL), the copy's own time (a graph of the copies alone) taken off. Each form's output is checked against
an fp32 reference after its graph ran (the wait must hold the activation's producer back). Per GEMM: each form's
best config over BK x warps, its microseconds and fraction of the limit (bytes / the better of a 1 GiB copy or
read, ``measure.bandwidth``).

    python bench/pdl_probe.py --out bench/results/pdl_probe_<gpu>_<date>.json     # GPU, ~2 min
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decode_hbm import replayed_us  # bench/ is the script's path

from pipeline.atomic import atomic_write_json
from pipeline.backends.measure import TimingSettings, bandwidth, copies_of
from pipeline.stats import geomean

GEMMS = (  # Llama-3-8B at one token: (name, outputs, K, fp8)
    ("fp8 qkv", 6144, 4096, True),
    ("fp8 o", 4096, 4096, True),
    ("fp8 gate_up", 28672, 4096, True),
    ("fp8 down", 4096, 14336, True),
    ("bf16 qkv", 6144, 4096, False),
    ("bf16 o", 4096, 4096, False),
    ("bf16 down", 4096, 14336, False),
)
FORMS = ("gemv", "pdl", "pdl_prefetch")
CONFIGS = [(bk, w) for bk in (512, 1024, 2048) for w in (2, 4, 8) if 2 * w * 32 <= bk <= 16 * w * 32]
CALLS, ROUNDS = 48, 9


@triton.jit
def gemv(x, w, out, sx, sw, K, BK: tl.constexpr, SCALED: tl.constexpr, GDC: tl.constexpr, PREFETCH: tl.constexpr):
    pc = tl.program_id(0)
    ks = tl.arange(0, BK)
    wp = w + pc.to(tl.int64) * K + ks
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
    acc = tl.zeros((BK,), dtype=tl.float32)
    if PREFETCH:
        tile = tl.load(wp)
        if GDC:
            tl.extra.cuda.gdc_wait()
        for k in range(BK, K, BK):
            following = tl.load(wp + k)
            acc += tile.to(tl.float32) * tl.load(x + k - BK + ks).to(tl.float32)
            tile = following
        acc += tile.to(tl.float32) * tl.load(x + K - BK + ks).to(tl.float32)
    else:
        if GDC:
            tl.extra.cuda.gdc_wait()
        for k in range(0, K, BK):
            acc += tl.load(wp + k).to(tl.float32) * tl.load(x + k + ks).to(tl.float32)
    total = tl.sum(acc)
    if SCALED:
        total *= tl.load(sx) * tl.load(sw)
    tl.store(out + pc, total.to(out.dtype.element_ty))


class Operands:
    """Rotating weights, activations, their sources (what the copy writes from) and outputs."""

    def __init__(self, n_out: int, k: int, fp8: bool, l2: int) -> None:
        dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        self.copies = copies_of(n_out * k * (1 if fp8 else 2), l2, TimingSettings().l2_factor)
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.ws = [(torch.randn(n_out, k, device="cuda", generator=gen) / k**0.5).to(dtype) for _ in range(self.copies)]
        self.srcs = [torch.randn(1, k, device="cuda", generator=gen).to(dtype) for _ in range(self.copies)]
        self.xs = [s.clone() for s in self.srcs]
        self.outs = [torch.empty(1, n_out, device="cuda", dtype=torch.bfloat16) for _ in range(self.copies)]
        self.scales = (torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda"))
        self.fp8, self.n_out, self.k = fp8, n_out, k
        self.bytes = n_out * k * (1 if fp8 else 2) + k * (1 if fp8 else 2) + n_out * 2

    def default(self, j: int) -> None:
        if self.fp8:
            torch._scaled_mm(self.xs[j], self.ws[j].t(), *self.scales, out_dtype=torch.bfloat16, out=self.outs[j])
        else:
            torch.mm(self.xs[j], self.ws[j].t(), out=self.outs[j])

    def ours(self, form: str, bk: int, warps: int):
        pdl = form != "gemv"

        def launch(j: int) -> None:
            gemv[(self.n_out,)](self.xs[j], self.ws[j], self.outs[j], *self.scales, self.k, BK=bk, SCALED=self.fp8,
                                GDC=pdl, PREFETCH=form == "pdl_prefetch", num_warps=warps, num_stages=2,
                                launch_pdl=pdl)  # fmt: skip

        return launch

    def reference(self, j: int) -> torch.Tensor:
        product = self.xs[j].float() @ self.ws[j].float().t()
        return product * (self.scales[0] * self.scales[1]) if self.fp8 else product


def graph_of(ops: Operands, call, after_copy: bool, calls: int = CALLS) -> torch.cuda.CUDAGraph:
    """``calls`` calls of ``call`` (each after the copy that writes its activation, with ``after_copy``)."""

    def step(i: int) -> None:
        j = i % ops.copies
        if after_copy:
            ops.xs[j].copy_(ops.srcs[j])
        if call is not None:
            call(j)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(ops.copies):
            step(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            step(i)
    torch.cuda.synchronize()
    return graph


def error_of(ops: Operands, call) -> float:
    """The largest relative error against the fp32 reference of one call per copy, each right after the copy
    that writes its activation, on activations and outputs wiped first (a GEMM that read its activation before
    the copy finished would read zeros)."""
    graph = graph_of(ops, call, True, calls=ops.copies)
    for j in range(ops.copies):
        ops.xs[j].zero_()
        ops.outs[j].fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    worst = 0.0
    for j in range(ops.copies):
        ref = ops.reference(j)
        worst = max(worst, ((ops.outs[j].float() - ref).abs().max() / ref.abs().max()).item())
    return worst


def probe(name: str, n_out: int, k: int, fp8: bool, l2: int, limit: float) -> dict:
    ops = Operands(n_out, k, fp8, l2)
    row: dict = {"gemm": f"{name} {n_out}x{k}", "bytes": ops.bytes, "copies": ops.copies}
    for setting in ("chain", "after_copy"):
        candidates = {"default": ops.default} | {
            f"{form} bk{bk} w{w}": ops.ours(form, bk, w) for form in FORMS for bk, w in CONFIGS if bk <= k
        }
        graphs = {label: graph_of(ops, call, setting == "after_copy") for label, call in candidates.items()}
        if setting == "after_copy":
            graphs["copy alone"] = graph_of(ops, None, True)
        us = replayed_us(graphs, CALLS, ROUNDS)
        copy_us = us.pop("copy alone", 0.0)
        best = {"default": ("default", us["default"] - copy_us)}
        for form in FORMS:
            label = min((lbl for lbl in us if lbl.startswith(form + " ")), key=us.get)
            best[form] = (label, us[label] - copy_us)
        row[setting] = {
            form: {"config": label, "us": round(t, 2), "hbm": round(ops.bytes / limit * 1e6 / t, 4)}
            for form, (label, t) in best.items()
        } | ({"copy_us": round(copy_us, 2)} if copy_us else {})  # fmt: skip
    row["rel_error"] = {label: error_of(ops, call) for label, call in candidates.items()}
    del ops
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    l2, limit = torch.cuda.get_device_properties(device).L2_cache_size, bandwidth(device)
    record = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(device), "rows": [],
              "torch": torch.__version__, "triton": triton.__version__, "limit_bytes_per_s": limit}  # fmt: skip
    for gemm in GEMMS:
        row = probe(*gemm, l2, limit)
        record["rows"].append(row)
        print(row["gemm"], {s: {f: row[s][f]["hbm"] for f in ("default", *FORMS)} for s in ("chain", "after_copy")},
              "worst error", max(row["rel_error"].values()), flush=True)  # fmt: skip
    for setting in ("chain", "after_copy"):
        record[f"geomean_hbm_{setting}"] = {
            form: geomean(r[setting][form]["hbm"] for r in record["rows"]) for form in ("default", *FORMS)
        }
    atomic_write_json(args.out, record)
    print(json.dumps({k: v for k, v in record.items() if k.startswith("geomean")}))


if __name__ == "__main__":
    main()
