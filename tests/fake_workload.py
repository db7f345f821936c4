"""Test double for a workload under TunableOp record-untuned mode, behaving as torch does.

It writes the lines given on the command line to PYTORCH_TUNABLEOP_UNTUNED_FILENAME with the device ordinal
spliced in before the last '.', opened in append mode, one file per "GPU"; a relative name resolves against
its own cwd, and where the directory does not exist nothing is written and nothing is said (torch's
behaviour). With PYTORCH_TUNABLEOP_VERBOSE=3 it logs one lookup line per call on stderr, as
TuningResultsManager::Lookup does: each LINE runs --calls times (or LINE@N runs N times).
Usage: fake_workload.py [--gpus N] [--exit CODE] [--counter FILE] [--calls N] LINE[@N]...
"""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--gpus", type=int, default=1)
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--counter")
parser.add_argument("--calls", type=int, default=1)
parser.add_argument("lines", nargs="*")
args = parser.parse_args()

if args.counter:
    with open(args.counter, "a") as handle:
        handle.write("run\n")
assert os.environ["PYTORCH_TUNABLEOP_ENABLED"] == "1"
assert os.environ["PYTORCH_TUNABLEOP_TUNING"] == "0"
assert os.environ["PYTORCH_TUNABLEOP_RECORD_UNTUNED"] == "1"
verbose = int(os.environ.get("PYTORCH_TUNABLEOP_VERBOSE", "0"))
name = os.environ["PYTORCH_TUNABLEOP_UNTUNED_FILENAME"]
stem, dot, ext = name.rpartition(".")
calls = [
    (line.rpartition("@")[0], int(line.rpartition("@")[2])) if "@" in line else (line, args.calls)
    for line in args.lines
]
print("warning: some library message", file=sys.stderr)
for gpu in range(args.gpus if calls else 0):  # torch opens the file at the first record
    path = f"{stem}{gpu}{dot}{ext}"
    if os.path.isdir(os.path.dirname(path) or "."):
        with open(path, "a") as handle:
            for line, _ in calls:
                handle.write(line + "\n")
    for line, times in calls:
        for call in range(times if verbose >= 3 else 0):  # as torch 2.11 logs it (seen on the H100)
            print(f"missing op_signature, returning null ResultEntry for {line}", file=sys.stderr)
            if call == 0 and gpu == 0:
                print(f"Untuned,{line}", file=sys.stderr)
            print("no result, using default", file=sys.stderr)
print("batch=1 prompt=8: prefill 10.0 tokens/s")
print("throughput: 1234.5 tokens/s")
if args.exit:
    print("Traceback: CUDA error: out of memory", file=sys.stderr)
sys.exit(args.exit)
