"""Test double of hipblaslt-bench (docs/upstream.md, "hipblaslt-bench"; docs/upstream.md cites
each rule), strict per generation (``HIPBLASLT_DOUBLE_GENERATION``):

  2024  hipBLASLt 0.10 (ROCm 6.3; the 7d9fb683 tree's clients/benchmarks/client.cpp): version 1000;
        '[i]transA' headers, no indent, rotating_buffer only when --rotating > 0; --scaleA/--scaleB take s|v
        (anything else silently means no scale); FP8 is f8_r/bf8_r (the fnuz types on gfx942; there is no
        f8_fnuz_r); HIPBLASLT_TUNING_FILE does not exist (ignored).
  2025  hipBLASLt 1.2 (rocm-libraries projects/hipblaslt clients/bench/src/client.cpp): version 100200;
        '[i]:' headers, indented values, rotating_buffer,flush,use_gpu_timer always; --scaleA/--scaleB take an
        int; f8_fnuz_r/bf8_fnuz_r exist, and on gfx942 f8_r/bf8_r are run as them (with an INFO line); with
        HIPBLASLT_TUNING_FILE set it first checks the file's Git Version (exit 1 on a mismatch), defaults
        --iters/--cold_iters 1000, --requested_solution -1, --rotating 512 and --flush on, maps --algo_method
        all and index to the heuristic (index then returns the best of all), and appends the winner's
        override rows to the file.

It accepts exactly the options its generation has (every bool option a pure flag, sizes repeatable) and
refuses any other; it prints the real output: version and device lines, a header and value line per
solution, the three --print_kernel_info lines, and a Winner: block when more than one solution ran.
Times come from a deterministic model of the problem (with ~0.3% noise per run; --flush adds 2%, the
flush's cost the real bench does not fully subtract), so searches and validations have something real to
find: solution 100 is the heuristic's pick, some others are faster.

Environment knobs (tests only):
  HIPBLASLT_DOUBLE_GENERATION  2024 (default) or 2025
  HIPBLASLT_DOUBLE_FAIL     M value: runs with that -m exit 1 with a HIP error
  HIPBLASLT_DOUBLE_HANG     M value: runs with that -m sleep for an hour
  HIPBLASLT_DOUBLE_GARBAGE  M value: runs with that -m print a torn value line
  HIPBLASLT_DOUBLE_SINGLE   1: every search finds a single solution (no Winner: block)
  HIPBLASLT_DOUBLE_LOG      file: each invocation's argv is appended as one JSON line
  HIPBLASLT_DOUBLE_SETTINGS_LOG  file: each run's effective settings (method, flush, tuning file, device and
                            HIP_VISIBLE_DEVICES, scales) as one JSON line
  HIPBLASLT_DOUBLE_BUILD    a build name: the version and git lines name it, and solution speeds change
                            with it (a library upgrade); the heuristic's pick stays solution 100
  HIPBLASLT_DOUBLE_NOISE    0: no noise, every run of the same command prints the same times
  HIPBLASLT_DOUBLE_DELAY    seconds each run sleeps first (a slower GPU, for concurrency tests)
  HIPBLASLT_DOUBLE_SCALE_HELP  letters|numbers|neither: how --scaleA/--scaleB take values and what --help says
                            of them (default: the generation's; a build between the trees may differ)
"""

import os
import sys
import time

try:  # the C modules that hashlib and random wrap: importing those two is a fifth of a run, and a DAG runs
    from _random import Random  # this double hundreds of times (the same digests, the same generator)
    from _sha1 import sha1

    try:
        from _sha2 import sha256  # CPython >= 3.12
    except ImportError:
        from _sha256 import sha256
except ImportError:
    from hashlib import sha1, sha256
    from random import Random

GENERATION = os.environ.get("HIPBLASLT_DOUBLE_GENERATION", "2024")
rl = GENERATION == "2025"
VERSION, GIT = ("100200", "de5c1aebb6-dirty") if rl else ("1000", "9ca3d958b6")
BUILD = os.environ.get("HIPBLASLT_DOUBLE_BUILD", "")
if BUILD:
    VERSION, GIT = ("100300" if rl else "1100"), sha1(BUILD.encode()).hexdigest()[:10]
time.sleep(float(os.environ.get("HIPBLASLT_DOUBLE_DELAY", "0")))
tuning_file = os.environ.get("HIPBLASLT_TUNING_FILE") if rl else None
if tuning_file and os.path.exists(tuning_file) and os.path.getsize(tuning_file) > 0:
    with open(tuning_file) as handle:
        first = handle.readline()
    if not first.startswith("Git Version: ") or first[len("Git Version: ") :].strip() != GIT:
        print("The hipBLASLt git version and the tuning file git version are not the same.")
        sys.exit(1)
# How --scaleA/--scaleB take a value: the generation's own, or a build that differs (a tree between the two)
HELP_SAYS = os.environ.get("HIPBLASLT_DOUBLE_SCALE_HELP") or ("numbers" if rl else "letters")
SCALES = HELP_SAYS if HELP_SAYS in ("letters", "numbers") else ("numbers" if rl else "letters")  # how it parses
SCALE_HELP = {  # the --scaleA/--scaleB descriptions of each client (docs/upstream.md, "hipblaslt-bench")
    "letters": "Apply scale for {} buffer. s = scalar, v = vector.",
    "numbers": "Apply scale for {} buffer. 0 = None, 1 = scalar, 2 = vector.",
    "neither": "Apply scale for {} buffer.",
}[HELP_SAYS]


def print_help() -> None:
    """The client's help as its options_description prints it: the option (26 wide), its description (82 wide),
    the default where it has one."""
    default = "" if SCALES == "letters" else "0"
    rows = [
        ("--help |-h", "produces this help message", None),
        ("--sizem |-m <value>", "Specific matrix size: the number of rows or columns in matrix.", "128"),
        ("--a_type <value>", "Precision of matrix A. Options: f32_r,f16_r,bf16_r,f8_r,bf8_r,i8_r", ""),
        ("--bias_vector", "Apply bias vector", None),
        ("--scaleA <value>", SCALE_HELP.format("A"), default),
        ("--scaleB <value>", SCALE_HELP.format("B"), default),
        ("--print_kernel_info", "Print solution, kernel name and solution index.", None),
        ("--version", "Prints the version number", None),
    ]
    for left, desc, value in rows:
        print(f"{left:<26} {desc:<82} " + ("" if value is None else f" (Default value is: {value})"))


if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
    print_help()
    sys.exit(0)
OPTIONS = {}  # option -> (dest, kind): kind int | float | str | append-int | flag


def option(names, kind):
    dest = names[-1].lstrip("-")
    OPTIONS.update({name: (dest, kind) for name in names})


for names in (
    ["-m", "--sizem"],
    ["-n", "--sizen"],
    ["-k", "--sizek"],
    ["--lda"],
    ["--ldb"],
    ["--ldc"],
    ["--ldd"],
    ["--lde"],
    ["--stride_a"],
    ["--stride_b"],
    ["--stride_c"],
    ["--stride_d"],
    ["--stride_e"],
    ["--splitk"],
    ["--wgm"],
):
    option(names, "append-int")  # sizes are repeatable
for names in (["--alpha"], ["--beta"], ["--activation_arg1"], ["--activation_arg2"]):
    option(names, "float")
for names in (
    ["-f", "--function"],
    ["-r", "--precision"],
    ["--a_type"],
    ["--b_type"],
    ["--c_type"],
    ["--d_type"],
    ["--compute_type"],
    ["--compute_input_typeA"],
    ["--compute_input_typeB"],
    ["--scale_type"],
    ["--initialization"],
    ["--transA"],
    ["--transB"],
    ["--algo_method"],
    ["--activation_type"],
    ["--bias_type"],
    ["--bias_source"],
    ["--api_method"],
    ["--yaml"],
    ["--data"],
    ["--log_function_name"],
    ["--function_filter"],
):
    option(names, "str")
for names in (["--scaleA"], ["--scaleB"]):  # letters: s|v; numbers: 0 none, 1 scalar, 2 vector, 3.. block formats
    option(names, "int" if SCALES == "numbers" else "str")
for names in (
    ["--batch_count"],
    ["--batch"],
    ["-i", "--iters"],
    ["-j", "--cold_iters"],
    ["--solution_index"],
    ["--requested_solution"],
    ["--device"],
    ["--workspace"],
    ["--rotating"],
    ["--grouped_gemm"],
    *((["--scaleC"], ["--scaleD"]) if rl else ()),
):
    option(names, "int")
for names in (
    ["-v", "--verify"],
    ["--bias_vector"],
    ["--scaleAlpha_vector"],
    ["--amaxScaleA"],
    ["--amaxScaleB"],
    ["--amaxD"],
    ["--use_e"],
    ["--gradient"],
    ["--use_user_args"],
    ["--c_equal_d"],
    ["--any_stride"],
    ["--print_kernel_info"],
    ["--use_gpu_timer"],
    ["--flush"],
    ["--version"],
    *((["--swizzleA"], ["--swizzleB"]) if rl else ()),
):
    option(names, "flag")  # every bool option a pure flag


def json_string(text):
    """``text`` as a JSON string: json's import (its regular expressions) costs a third of a launch."""
    return '"' + "".join(c if c >= " " and c not in '"\\' else f"\\u{ord(c):04x}" for c in text) + '"'


def usage_error(message):
    print(f"usage: hipblaslt-bench [options]\nhipblaslt-bench: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse(argv):
    """argv as the client's option table takes it (argparse's rules, without its import: this runs per launch):
    '--opt value' or '--opt=value', repeatable sizes, pure flags; anything else is refused, exit 2."""
    values = {dest: False if kind == "flag" else None for dest, kind in OPTIONS.values()}
    unknown, i = [], 0
    while i < len(argv):
        name, given, inline = argv[i].partition("=") if argv[i].startswith("--") else (argv[i], "", "")
        i += 1
        if name not in OPTIONS:
            unknown.append(argv[i - 1])
            continue
        dest, kind = OPTIONS[name]
        if kind == "flag":
            if given:  # "--flag=" too, as argparse has it
                usage_error(f"argument {name}: ignored explicit argument '{inline}'")
            values[dest] = True
            continue
        if not given:
            if i >= len(argv) or (argv[i].startswith("-") and argv[i] in OPTIONS):
                usage_error(f"argument {name}: expected one argument")
            inline, i = argv[i], i + 1
        convert = {"int": int, "append-int": int, "float": float, "str": str}[kind]
        try:
            value = convert(inline)
        except ValueError:
            usage_error(f"argument {name}: invalid {convert.__name__} value: '{inline}'")
        if kind == "append-int":
            values[dest] = [*(values[dest] or []), value]
        else:
            values[dest] = value
    if unknown:
        usage_error(f"unrecognized arguments: {' '.join(unknown)}")
    return type("Args", (), values)


args = parse(sys.argv[1:])
if args.version:
    print(f"hipBLASLt version: {VERSION}")
    print(f"hipBLASLt git version: {GIT}")
    sys.exit(0)
TYPES = {"f32_r", "s", "f64_r", "d", "f16_r", "h", "bf16_r", "i8_r", "i8", "i32_r", "i", "f8_r", "bf8_r"}
if rl:
    TYPES |= {"f8_fnuz_r", "bf8_fnuz_r"}
for flag in ("a_type", "b_type", "c_type", "d_type", "bias_type"):
    value = getattr(args, flag)
    if value is not None and value not in TYPES:
        print(f"hipblaslt-bench error: Invalid value for --{flag} {value}", file=sys.stderr)
        sys.exit(255)
if tuning_file:  # the 2025 client's defaults and mappings under HIPBLASLT_TUNING_FILE
    args.iters = 1000 if args.iters is None else args.iters
    args.cold_iters = 1000 if args.cold_iters is None else args.cold_iters
    args.rotating = 512 if args.rotating is None else args.rotating
    args.flush = True
if os.environ.get("HIPBLASLT_DOUBLE_LOG"):
    with open(os.environ["HIPBLASLT_DOUBLE_LOG"], "a") as log:
        log.write("[" + ", ".join(map(json_string, sys.argv[1:])) + "]\n")

m, n, k = args.sizem[0], args.sizen[0], args.sizek[0]
ta, tb = args.transA or "N", args.transB or "N"
batch = args.batch_count or 1
rows = {"a": m if ta == "N" else k, "b": k if tb == "N" else n, "c": m}
lda, ldb, ldc = (args.lda or [rows["a"]])[0], (args.ldb or [rows["b"]])[0], (args.ldc or [m])[0]
for name, ld in (("lda", lda), ("ldb", ldb), ("ldc", ldc)):
    if ld < rows[name[-1]]:
        print(f"hipblaslt-bench: invalid {name} {ld} < {rows[name[-1]]}", file=sys.stderr)
        sys.exit(1)
types = [args.a_type or "f16_r", args.b_type or "f16_r", args.c_type or "f16_r", args.d_type or "f16_r"]
if rl:  # gfx942 has no OCP FP8: the 2025 client runs f8_r/bf8_r as the fnuz types
    for i, name in enumerate(types):
        if name in ("f8_r", "bf8_r"):
            print(f"hipblaslt-bench INFO: Using {name.replace('_r', '_fnuz_r')} instead of {name}", file=sys.stderr)
            types[i] = name.replace("_r", "_fnuz_r")
compute = args.compute_type or "f32_r"

print(f"hipBLASLt version: {VERSION}")
print(f"hipBLASLt git version: {GIT}")
print("Query device success: there are 1 devices. (Target device ID is 0)")
print(
    f"Device ID {args.device or 0} : AMD Instinct MI300X (hipblaslt-bench test double: its figures are a model) "
    "gfx942:sramecc+:xnack-"
)
print("with 206.1 GB memory, max. SCLK 2100 MHz, max. MCLK 1300 MHz, compute capability 9.4")
print("maxGridDimX 2147483647, sharedMemPerBlock 65.5 KB, maxThreadsPerBlock 1024, warpSize 64")
print()
if str(m) == os.environ.get("HIPBLASLT_DOUBLE_FAIL"):
    print("hipBLASLt error: HIPBLAS_STATUS_EXECUTION_FAILED (hipErrorIllegalAddress)", file=sys.stderr)
    sys.exit(1)
if str(m) == os.environ.get("HIPBLASLT_DOUBLE_HANG"):
    time.sleep(3600)

size = {"f16_r": 2, "bf16_r": 2, "f32_r": 4, "f64_r": 8, "f8_r": 1, "bf8_r": 1, "f8_fnuz_r": 1, "bf8_fnuz_r": 1}
flops = 2.0 * m * n * k * batch
moved = (m * k * size[types[0]] + k * n * size[types[1]] + m * n * size[types[3]]) * batch
floor_us = max(flops / 1.3e15, moved / 5.3e12) * 1e6 + 4.0


def scale_format(value) -> int:
    """The scaling format a run asked for: 0 none, 1 scalar, 2 vector (letters: s|v, anything else none)."""
    if SCALES == "numbers":
        return value or 0
    return {"s": 1, "v": 2}.get(value, 0)


scales = (scale_format(args.scaleA), scale_format(args.scaleB))


def factor(index: int) -> float:
    """How fast solution ``index`` runs this problem, relative to the heuristic's pick (100). The scales are part
    of the problem: the same sizes without them are another problem, with other speeds."""
    if index == 100:
        return 1.0
    scaled = f",{scales}" if any(scales) else ""  # unscaled problems keep the speeds they always had
    digest = sha256(f"{m},{n},{k},{batch},{ta}{tb},{index}{BUILD}{scaled}".encode()).digest()
    return 0.85 + 0.45 * digest[0] / 255


method = args.algo_method or "heuristic"
if tuning_file and method in ("all", "index"):  # both become the heuristic, which then returns every solution
    method = "all"
if os.environ.get("HIPBLASLT_DOUBLE_SETTINGS_LOG"):
    import json

    with open(os.environ["HIPBLASLT_DOUBLE_SETTINGS_LOG"], "a") as log:
        log.write(
            json.dumps(
                {
                    "method": args.algo_method or "heuristic",
                    "flush": bool(args.flush),
                    "tuning_file": bool(tuning_file),
                    "device": args.device or 0,
                    "visible": os.environ.get("HIP_VISIBLE_DEVICES"),
                    "m": m,
                    "a_type": types[0],
                    "scaleA": args.scaleA,
                    "scaleB": args.scaleB,
                    "scales": list(scales),
                }
            )
            + "\n"
        )
if method == "index":
    if args.solution_index is None or args.solution_index < 0:
        print("hipblaslt-bench: --algo_method index needs --solution_index", file=sys.stderr)
        sys.exit(1)
    indices = [args.solution_index]
elif method == "all" and os.environ.get("HIPBLASLT_DOUBLE_SINGLE") != "1":
    indices = [100, 2061, 2077, 3150, 4022, 5310]
else:
    indices = [100]
print(f"Is supported {len(indices)} / Total solutions: {len(indices)}")
noise = Random(os.getpid() ^ time.time_ns())
noise_off = os.environ.get("HIPBLASLT_DOUBLE_NOISE") == "0"
columns = [
    "transA",
    "transB",
    "grouped_gemm",
    "batch_count",
    "m",
    "n",
    "k",
    "alpha",
    "lda",
    "stride_a",
    "beta",
    "ldb",
    "stride_b",
    "ldc",
    "stride_c",
    "ldd",
    "stride_d",
    "a_type",
    "b_type",
    "c_type",
    "d_type",
    "compute_type",
    "scaleA",
    "scaleB",
    "scaleC",
    "scaleD",
    "amaxD",
    "activation_type",
    "bias_vector",
    "bias_type",
]
if rl:
    columns[columns.index("activation_type") : columns.index("activation_type")] = ["swizzle_a", "swizzle_b"]
    columns += ["aux_type", "rotating_buffer", "flush", "use_gpu_timer"]
elif args.rotating:
    columns.append("rotating_buffer")
columns += ["hipblaslt-Gflops", "hipblaslt-GB/s", "us"]
results = []
for index in indices:
    jitter = 0.0 if noise_off else 0.006 * noise.random() - 0.003  # +-0.3%
    us = floor_us * factor(index) * (1 + jitter) * (1.02 if args.flush else 1.0)
    values = {
        "transA": ta,
        "transB": tb,
        "grouped_gemm": "0",
        "batch_count": batch,
        "m": m,
        "n": n,
        "k": k,
        "alpha": "1",
        "lda": lda,
        "stride_a": lda * (k if ta == "N" else m),
        "beta": "0",
        "ldb": ldb,
        "stride_b": ldb * (n if tb == "N" else k),
        "ldc": ldc,
        "stride_c": ldc * n,
        "ldd": ldc,
        "stride_d": ldc * n,
        "a_type": types[0],
        "b_type": types[1],
        "c_type": types[2],
        "d_type": types[3],
        "compute_type": compute,
        "scaleA": scales[0],
        "scaleB": scales[1],
        "scaleC": 0,
        "scaleD": 0,
        "amaxD": 0,
        "swizzle_a": 0,
        "swizzle_b": 0,
        "activation_type": args.activation_type or "none",
        "bias_vector": int(args.bias_vector),
        "bias_type": args.bias_type or types[3],
        "aux_type": types[3],
        "rotating_buffer": args.rotating or 0,
        "flush": int(args.flush),
        "use_gpu_timer": int(args.use_gpu_timer),
        "hipblaslt-Gflops": f"{flops / us / 1e3:g}",
        "hipblaslt-GB/s": f"{moved / us / 1e3:g}",
        "us": f"{us:g}",
    }
    results.append((us, index, values))


def block(position, index, values):
    print(f"[{position}]{':' if rl else ''}" + ",".join(columns))
    line = ",".join(str(values[c]) for c in columns)
    if str(m) == os.environ.get("HIPBLASLT_DOUBLE_GARBAGE"):
        line = line[: len(line) // 2]
    print(("    " if rl else "") + line)
    if args.print_kernel_info:
        pad = "    " if rl else ""
        name = f"Cijk_Alik_Bljk_BBS_BH_UserArgs_MT{64 + index % 7 * 32}x128x64_MI16x16x1_SN_IDX{index}"
        print(f"{pad}--Solution index: {index}")
        print(f"{pad}--Solution name:  {name}")
        print(f"{pad}--kernel name:    {name}")


for position, (_us, index, values) in enumerate(results):
    block(position, index, values)
best = min(results, key=lambda r: r[0])
if len(results) > 1:
    print("Winner: ")
    block(results.index(best), best[1], best[2])
if tuning_file:
    keys = ["transA", "transB", "batch_count", "m", "n", "k", "a_type", "b_type", "c_type", "d_type", "compute_type"]
    new = not os.path.exists(tuning_file) or os.path.getsize(tuning_file) == 0
    with open(tuning_file, "a") as handle:
        if new:
            handle.write(f"Git Version: {GIT}\n")
        handle.write(",".join([*keys, "solution_index", "gcnArchName", "CUs"]) + "\n")
        handle.write(",".join(str(best[2][c]) for c in keys) + f",{best[1]},gfx942,304\n")
