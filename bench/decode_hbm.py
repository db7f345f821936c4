"""Decode GEMMs as a fraction of the HBM limit, per method (#36, item 5): torch's default path, the product's
cuBLASLt search alone, Inductor's max-autotune, and the product (Bench with the Triton kernels, ``--triton``).

Each GEMM is a projection of Llama-3-8B or Qwen2-7B at T tokens (bf16 ``F.linear``), or Llama-3-8B's as a
tensorwise-scaled FP8 ``torch._scaled_mm`` into bf16. The product's backend tunes it twice, without and with
the Triton kernels (``CublasLtBackend.tune_one``, default settings); each winner is applied as it ships, a row
in a results file routed by ``pipeline.runtime``. max-autotune is ``torch.compile(mode="max-autotune-no-cudagraphs")``
of the same call, in a fresh Inductor cache. Every method's calls are captured in a CUDA graph over rotating
weights (together more than three times the L2), so the time is the GPU's alone; the graphs are replayed
interleaved, 9 rounds in ``stats.round_order``, medians. The limit is the bytes a call must move over the
bandwidth a device copy or read reaches in the same run (``measure.bandwidth``); beside it each row records the
fraction a streaming read of the call's bytes reaches in the same run (``read_floor.read_floor``: what one
launch of that size can reach) and each method's time against that read.

``--winners-from RECORD`` tunes nothing: it times torch's default and the winners an earlier record names for
cuBLASLt alone and for the product (no max-autotune, no read floor) and puts each beside two limits measured in
the same run, the better of a copy and a read (as above) and the copy alone (#36's definition of the limit).

    python bench/decode_hbm.py --out bench/results/decode_hbm_<gpu>_<date>.json \\
        [--models ...] [--tokens 1 4 8] [--gemms ...] [--winners-from RECORD]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads after the output is claimed (main)
    import torch

from pipeline.api import GemmProblem, geomean, round_order

MODELS = {  # projection -> (output features, input features)
    "llama3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
                  "lm_head": (128256, 4096)},
    "qwen2-7b": {"qkv": (4608, 3584), "o": (3584, 3584), "gate_up": (37888, 3584), "down": (3584, 18944),
                 "lm_head": (152064, 3584)},
}  # fmt: skip
MODELS["llama3-8b-fp8"] = MODELS["llama3-8b"]  # the same projections as tensorwise-scaled e4m3 _scaled_mm
METHODS = ("default", "cublaslt", "max_autotune", "product")
ROUNDS = 9


class Case:
    """One GEMM's rotating operands and its call: ``call(i)`` runs it on copy ``i``."""

    def __init__(self, n_out: int, k: int, tokens: int, fp8: bool, l2: int) -> None:
        import torch

        from pipeline.api import TimingSettings, copies_of

        weight_bytes = n_out * k * (1 if fp8 else 2)
        self.copies = copies_of(weight_bytes, l2, TimingSettings().l2_factor)
        self.fp8 = fp8
        gen = torch.Generator(device="cuda").manual_seed(0)
        ws, xs = [], []
        for _ in range(self.copies):
            w = torch.randn(n_out, k, device="cuda", dtype=torch.bfloat16, generator=gen) / k**0.5
            x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            ws.append(w.to(torch.float8_e4m3fn) if fp8 else w)
            xs.append(x.to(torch.float8_e4m3fn) if fp8 else x)
            del w, x
        self.ws, self.xs = ws, xs
        self.scales = (torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda"))
        self.bytes = weight_bytes + tokens * k * (1 if fp8 else 2) + tokens * n_out * 2

    def fn(self, x, w, sx=None, sw=None):
        import torch
        import torch.nn.functional as F

        if self.fp8:
            return torch._scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16)
        return F.linear(x, w)

    def problem(self) -> GemmProblem:
        """The problem as the runtime keys this call (and TunableOp records it)."""
        import torch

        from pipeline.runtime.scaled import problem_of_call

        if self.fp8:
            return problem_of_call(self.xs[0], self.ws[0].t(), *self.scales, None, None, torch.bfloat16, False)
        tokens, k = self.xs[0].shape
        n_out = self.ws[0].shape[0]
        return GemmProblem("gemm", "T", "N", n_out, tokens, k, k, k, n_out)


def capture(case: Case, fn, calls: int) -> torch.cuda.CUDAGraph:
    """A graph of ``calls`` calls of ``fn`` cycling over the copies (warmed up on a side stream first)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(case.copies):
            fn(case.xs[i], case.ws[i], *case.scales)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            j = i % case.copies
            fn(case.xs[j], case.ws[j], *case.scales)
    torch.cuda.synchronize()
    return graph


def with_row(problem: GemmProblem, winner: str, path: Path):
    """The runtime installed with ``winner`` as ``problem``'s row (None: the default won, nothing to install)."""
    import torch

    import pipeline.runtime as rt
    from pipeline.api import TRITON_PREFIX as TRITON
    from pipeline.api import TunableOpEntry, write_tunableop_results

    if not winner.startswith(("Gemm_Cublaslt", TRITON)):
        return None
    row = TunableOpEntry.from_problem(problem, winner, 0)
    write_tunableop_results(path, {"PT_VERSION": torch.__version__.split("+")[0]}, [row])
    return rt.install(path)


def measure(case: Case, problem: GemmProblem, winners: dict[str, str], scratch: Path, methods=METHODS) -> dict:
    import torch

    import pipeline.runtime as rt

    calls = case.copies * max(1, 48 // case.copies)
    graphs, notes = {}, {}
    for method in methods:
        if method == "max_autotune":
            start = time.monotonic()
            torch._dynamo.reset()  # each GEMM its own compile (dynamo's recompile limit would fall back to eager)
            compiled = torch.compile(case.fn, mode="max-autotune-no-cudagraphs", dynamic=False)
            graphs[method] = capture(case, compiled, calls)
            notes["max_autotune_compile_s"] = round(time.monotonic() - start, 1)
            continue
        runtime = with_row(problem, winners.get(method, "Default"), scratch / f"{method}.csv")
        try:
            graphs[method] = capture(case, case.fn, calls)
            if runtime is not None:
                notes[f"{method}_tuned_calls"] = sum(runtime.status()["tuned_calls"].values())
        finally:
            rt.uninstall()
    us = replayed_us(graphs, calls)
    del graphs
    return us | notes


def replayed_us(graphs: dict[str, torch.cuda.CUDAGraph], calls: int, rounds: int = ROUNDS) -> dict[str, float]:
    """Median microseconds per call of each graph of ``calls`` calls, its replays interleaved over ``rounds``."""
    import torch

    for graph in graphs.values():
        graph.replay()
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for r in range(rounds):
        for name in round_order(list(graphs), r):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[name].replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / calls)
    return {name: statistics.median(v) for name, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    from pipeline.api import INPUT, BadInput, claim_output_file

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", nargs="+", help="default: all of MODELS")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--gemms", nargs="+", help="these projections alone (default: all)")
    parser.add_argument("--winners-from", type=Path, help="an earlier record: time its winners, tune nothing")
    args = parser.parse_args(argv)
    try:  # before torch loads and anything is measured, as the other benchmarks claim theirs
        claim_output_file(args.out, [args.winners_from] if args.winners_from else [], force=True)
        earlier = winners_of(args.winners_from) if args.winners_from else []
    except (BadInput, FileNotFoundError) as err:  # a path or file given is wrong
        print(f"decode_hbm: {err}", file=sys.stderr)
        return INPUT
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))  # autotuned here, fresh

    unknown = sorted(set(args.models or ()) - set(MODELS))
    if unknown:
        parser.error(f"--models {' '.join(unknown)}: not one of {', '.join(MODELS)}")
    args.models = args.models or list(MODELS)
    if args.winners_from:
        retime(args, earlier)
        return 0
    import torch
    from read_floor import read_floor  # bench/ is the script's directory

    from pipeline.api import CublasLtBackend, TuneSettings, bandwidth

    device = torch.device("cuda", 0)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    limit = bandwidth(device)
    settings = TuneSettings()
    scratch = Path(tempfile.mkdtemp(prefix="decode-hbm-"))
    library, product = CublasLtBackend(0), CublasLtBackend(0, triton_cache=str(scratch / "triton-cache"))
    rows = []
    for model in args.models:
        for name, (n_out, k) in MODELS[model].items():
            if args.gemms and name not in args.gemms:
                continue
            for tokens in args.tokens:
                case = Case(n_out, k, tokens, model.endswith("-fp8"), l2)
                problem = case.problem()
                start = time.monotonic()
                lib = library.tune_one(problem, settings)
                mid = time.monotonic()
                prod = product.tune_one(problem, settings)
                tune_s = {"cublaslt": round(mid - start, 1), "product": round(time.monotonic() - mid, 1)}
                winners = {"cublaslt": lib.winner, "product": prod.winner}
                us = measure(case, problem, winners, scratch)
                hbm = {m: case.bytes / limit * 1e6 / us[m] for m in METHODS}
                floor = read_floor(case.bytes, device, limit)["read_frac"]
                rows.append({
                    "model": model, "gemm": f"{name} {n_out}x{k}", "tokens": tokens, "bytes": case.bytes,
                    "us": {m: round(us[m], 2) for m in METHODS}, "hbm": {m: round(hbm[m], 4) for m in METHODS},
                    "read_floor": round(floor, 4), "of_floor": {m: round(hbm[m] / floor, 4) for m in METHODS},
                    "winners": winners, "bench_speedup": {"cublaslt": lib.speedup, "product": prod.speedup},
                    "tune_s": tune_s, "notes": {k: v for k, v in us.items() if k not in METHODS},
                })  # fmt: skip
                print(f"{model:13} {name:8} T={tokens}: " + " ".join(f"{m} {hbm[m]:.3f}" for m in METHODS)
                      + f" | {prod.winner[:34]} ({tune_s['product']} s)", flush=True)  # fmt: skip
                del case
                torch.cuda.empty_cache()
                _write(args.out, device, limit, rows)
    print(json.dumps(_write(args.out, device, limit, rows)["geomean_hbm_fraction"]))
    return 0


RETIMED = ("default", "cublaslt", "product")


ROW_FIELDS = ("model", "gemm", "tokens", "winners")  # what --winners-from reads of each row of its record


def winners_of(path: Path) -> list[dict]:
    """The rows of a record this script wrote (``rows``, each with ``ROW_FIELDS``); ``BadInput`` naming the file
    (and its line, or the row) for one that is not JSON or not such a record; a missing one raises as
    ``load_json`` does (FileNotFoundError, an input error: ``errors.exit_code``)."""
    from pipeline.api import BadInput, load_json

    record = load_json(path, "a decode_hbm.py record")
    rows = record.get("rows") if isinstance(record, dict) else None
    if not isinstance(rows, list):
        raise BadInput(f"{path}: no list of rows; --winners-from takes a record decode_hbm.py wrote")
    for i, row in enumerate(rows):
        missing = [f for f in ROW_FIELDS if not isinstance(row, dict) or f not in row]
        if missing:
            raise BadInput(f"{path}: row {i} has no {', '.join(missing)}")
    return rows


def retime(args: argparse.Namespace, earlier: list[dict]) -> None:
    """``--winners-from``: each selected row of the earlier record (``winners_of``), its winners timed again
    beside torch's default, as fractions of the better of a copy and a read and of the copy alone, both measured
    in this run."""
    import torch

    from pipeline.api import copy_and_read

    device = torch.device("cuda", 0)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    copy, read = copy_and_read(device)
    limits = {"better": max(copy, read), "copy": copy}
    scratch = Path(tempfile.mkdtemp(prefix="decode-hbm-"))
    dims = {(model, name): shape for model in MODELS for name, shape in MODELS[model].items()}
    rows = []
    for old in earlier:
        model, name, tokens = old["model"], old["gemm"].split()[0], old["tokens"]
        if model not in args.models or tokens not in args.tokens or (args.gemms and name not in args.gemms):
            continue
        case = Case(*dims[(model, name)], tokens, model.endswith("-fp8"), l2)
        us = measure(case, case.problem(), old["winners"], scratch, RETIMED)
        rows.append({
            "model": model, "gemm": old["gemm"], "tokens": tokens, "bytes": case.bytes, "winners": old["winners"],
            "us": {m: round(us[m], 2) for m in RETIMED},
            **{f"hbm_{k}": {m: round(case.bytes / v * 1e6 / us[m], 4) for m in RETIMED} for k, v in limits.items()},
        })  # fmt: skip
        print(f"{model:13} {name:8} T={tokens}: " + " ".join(f"{m} {rows[-1]['hbm_copy'][m]:.3f}" for m in RETIMED),
              flush=True)  # fmt: skip
        del case
        torch.cuda.empty_cache()
        _write_retimed(args, device, copy, read, rows)
    print(json.dumps(_write_retimed(args, device, copy, read, rows)["geomean"]))


def _write_retimed(args: argparse.Namespace, device: torch.device, copy: float, read: float, rows: list) -> dict:
    from triton_decode import write_record

    groups = {"all": rows, "bf16": [r for r in rows if not r["model"].endswith("-fp8")],
              "fp8": [r for r in rows if r["model"].endswith("-fp8")]}  # fmt: skip
    fields = {
        "rounds": ROUNDS,
        "winners_from": args.winners_from.name,
        "read_bandwidth_bytes_per_s": read,
        "limits": {"better": "the better of a 1 GiB copy and read", "copy": "a 1 GiB copy (#36's definition)"},
        "geomean": {f"hbm_{limit}": _geomeans(groups, f"hbm_{limit}") for limit in ("better", "copy")},
        "rows": rows,
    }
    return write_record(args.out, device, copy, fields)


def _geomeans(groups: dict[str, list[dict]], field: str) -> dict:
    return {g: {m: geomean(r[field][m] for r in members) for m in RETIMED} for g, members in groups.items() if members}


def _write(out: str, device: torch.device, limit: float, rows: list[dict]) -> dict:
    """The record so far (written after every GEMM: a run cut short keeps what it measured)."""
    from triton_decode import write_record

    best_rival = [max(r["hbm"]["cublaslt"], r["hbm"]["max_autotune"]) for r in rows]
    fields = {
        "rounds": ROUNDS,
        "geomean_hbm_fraction": {m: geomean(r["hbm"][m] for r in rows) for m in METHODS},
        "geomean_of_read_floor": {m: geomean(r["of_floor"][m] for r in rows) for m in METHODS},
        "product_below_best_rival_by_1pct": [
            f"{r['model']} {r['gemm']} T={r['tokens']}"
            for r, rival in zip(rows, best_rival, strict=True)
            if r["hbm"]["product"] < rival * 0.99
        ],
        "rows": rows,
    }
    return write_record(out, device, limit, fields)


if __name__ == "__main__":
    sys.exit(main())
