#!/usr/bin/env python3
"""Test double of hipBLASLt's utilities/find_exact.py (docs/upstream.md, "find_exact.py"), strict
per generation, told apart by the build tree it is given (docs/upstream.md):

  2024  (the 7d9fb683 tree; utilities/find_exact.py:118-126, 205-231) the bench at
        clients/staging/hipblaslt-bench, library/MatchTable.yaml; type letters H, S and FP8 only (B asserts);
        no --device: it benches on device 0 whatever TestConfig says.
  2025  (rocm-libraries projects/hipblaslt/utilities/find_exact.py) the bench at clients/hipblaslt-bench,
        device-library/MatchTable.yaml; letters H, B, S, FP8N and FP8; --device TestConfig.Device (default 0);
        HIPBLASLT_BENCH_PRINT_COMMAND=1 in the bench's environment.

    python3 find_exact.py <config.yaml> <hipBLASLt build dir> <output dir>

What upstream does, as the spec records it: read the Bench section (ProblemType type letters, TestConfig,
TuningParameters.SplitK, ProblemSizes [M, N, B, K] sorted and deduplicated); per size run the build's
hipblaslt-bench with the documented arguments, stdout to
0_Bench/result_<TA><TB>_<gemmtype>_<M>x<N>x<B>x<K>.txt; read each result bottom-up to its Winner: line (the
solution index is the first integer of the --Solution index line); map the global index through the
build's MatchTable.yaml to [source logic file, local index]; write per source file a copy of that logic
under 1_LogicYaml/ with the winning kernels renumbered and ExactLogic [[m,n,b,k,lda,ldb,ldc,ldd],[i,gflops]]
(the lda,ldb,ldc,ldd order upstream writes), RangeLogic null and LibraryType Equality.
"""

import argparse
import os
import re
import subprocess
from pathlib import Path

import yaml

parser = argparse.ArgumentParser()
parser.add_argument("config_file", nargs="+")
parser.add_argument("build_path")
parser.add_argument("output_path")
args = parser.parse_args()
build, out = Path(args.build_path), Path(args.output_path)
staging = build / "clients" / "staging" / "hipblaslt-bench"
generation = "2024" if staging.exists() else "2025"
TYPES = {"H": "f16_r", "S": "f32_r", "FP8": "f8_r"}
if generation == "2025":
    TYPES.update(B="bf16_r", FP8N="f8_fnuz_r")
config = yaml.safe_load(Path(args.config_file[0]).read_text())
bench_cfg = config["Bench"]
ptype, test = bench_cfg["ProblemType"], bench_cfg.get("TestConfig", {})
letters = {
    k: str(ptype.get(k, "S")).upper()
    for k in ("DataTypeA", "DataTypeB", "DataTypeC", "DataTypeD", "ComputeInputDataType")
}
assert letters["DataTypeC"] == letters["DataTypeD"], "C and D must be the same type"
for letter in letters.values():
    assert letter in TYPES, f"unknown type letter {letter}"  # upstream: a bare assert 0 in dataType2Bench
compute_in = letters["ComputeInputDataType"]
assert str(ptype.get("ComputeDataType", "S")).upper() == "S", "only S compute is supported"
ta, tb = ("T" if ptype.get("TransposeA") else "N"), ("T" if ptype.get("TransposeB") else "N")
mixed = letters["DataTypeA"] != compute_in or letters["DataTypeB"] != compute_in
gemm_type = (f"{letters['DataTypeA']}{letters['DataTypeB']}_" if mixed else "") + f"{compute_in}{letters['DataTypeD']}S"
if ptype.get("UseBias"):
    gemm_type += "_Bias"
bench = staging if generation == "2024" else build / "clients" / "hipblaslt-bench"
table_path = build / ("library" if generation == "2024" else "device-library") / "MatchTable.yaml"
match_table = yaml.safe_load(table_path.read_text())
sizes = sorted({tuple(size) for size in bench_cfg["ProblemSizes"]})
(out / "0_Bench").mkdir(parents=True, exist_ok=True)
winners = {}
for m, n, b, k in sizes:  # a 3-element size fails here, as upstream's size[3] does
    device = ["--device", str(test.get("Device", 0))] if generation == "2025" else []
    cmd = [
        str(bench),
        "--print_kernel_info",
        *device,
        "--transA",
        ta,
        "--transB",
        tb,
        "--a_type",
        TYPES[letters["DataTypeA"]],
        "--b_type",
        TYPES[letters["DataTypeB"]],
        "--c_type",
        TYPES[letters["DataTypeC"]],
        "--d_type",
        TYPES[letters["DataTypeD"]],
        "--compute_type",
        "f32_r",
        "--algo_method",
        test.get("AlgoMethod", "all"),
        "--api_method",
        "cpp",
        "--requested_solution",
        "2",
        "--solution_index",
        "0",
        "-j",
        str(test.get("ColdIter", 20)),
        "-i",
        str(test.get("Iter", 100)),
        "-m",
        str(m),
        "-n",
        str(n),
        "-k",
        str(k),
        "--batch_count",
        str(b),
    ]
    if ptype.get("UseBias"):
        cmd.append("--bias_vector")
    if test.get("RotatingBuffer", 512):
        cmd += ["--rotating", str(test.get("RotatingBuffer", 512))]
    for splitk in bench_cfg.get("TuningParameters", {}).get("SplitK", [0]):
        cmd += ["--splitk", str(splitk)]
    result = out / "0_Bench" / f"result_{ta}{tb}_{gemm_type}_{m}x{n}x{b}x{k}.txt"
    with result.open("w") as handle:
        env = {**os.environ, **({"HIPBLASLT_BENCH_PRINT_COMMAND": "1"} if generation == "2025" else {})}
        subprocess.run(cmd, stdout=handle, check=True, env=env)
    lines = result.read_text().splitlines()[::-1]
    at = next(i for i, line in enumerate(lines) if "Winner:" in line)
    index = int(re.search(r"\d+", lines[at - 3])[0])
    header, values = lines[at - 1].split(":", 1)[-1].split(","), lines[at - 2].strip().split(",")
    row = dict(zip([h.split("]")[-1] for h in header], values, strict=True))
    lds = [int(row[c]) for c in ("lda", "ldb", "ldc", "ldd")]
    winners[(m, n, b, k)] = (index, lds, float(row["hipblaslt-Gflops"]))
if "CreateLogic" in config:
    grouped = {}
    for size, (index, lds, gflops) in winners.items():
        source, local = match_table[index]
        grouped.setdefault(source, []).append((size, local, lds, gflops))
    (out / "1_LogicYaml").mkdir(exist_ok=True)
    for source, rows in grouped.items():
        data = yaml.safe_load(Path(source).read_text())
        kept, exact = [], []
        for size, local, lds, gflops in rows:
            if local not in kept:
                kept.append(local)
            exact.append([[*size, *lds], [kept.index(local), gflops]])
        solutions = []
        for new, local in enumerate(kept):
            solution = dict(data[5][local])
            solution["SolutionIndex"] = new
            solutions.append(solution)
        data[5], data[7], data[8], data[11] = solutions, exact, None, "Equality"
        (out / "1_LogicYaml" / Path(source).name).write_text(yaml.dump(data, default_flow_style=None))
