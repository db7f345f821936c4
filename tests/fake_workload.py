"""Test double for a workload under TunableOp record-untuned mode.

It writes the lines given on the command line the way torch does: to PYTORCH_TUNABLEOP_UNTUNED_FILENAME with
the device ordinal spliced in before the last '.', opened in append mode, one file per "GPU".
Usage: fake_workload.py [--gpus N] [--exit CODE] [--counter FILE] LINE...
"""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--gpus", type=int, default=1)
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--counter")
parser.add_argument("lines", nargs="*")
args = parser.parse_args()

if args.counter:
    with open(args.counter, "a") as handle:
        handle.write("run\n")
assert os.environ["PYTORCH_TUNABLEOP_ENABLED"] == "1"
assert os.environ["PYTORCH_TUNABLEOP_TUNING"] == "0"
assert os.environ["PYTORCH_TUNABLEOP_RECORD_UNTUNED"] == "1"
name = os.environ["PYTORCH_TUNABLEOP_UNTUNED_FILENAME"]
stem, dot, ext = name.rpartition(".")
for gpu in range(args.gpus if args.lines else 0):  # torch opens the file at the first record
    with open(f"{stem}{gpu}{dot}{ext}", "a") as handle:
        for line in args.lines:
            handle.write(line + "\n")
print("batch=1 prompt=8: prefill 10.0 tokens/s")
print("throughput: 1234.5 tokens/s")
if args.exit:
    print("Traceback: CUDA error: out of memory", file=sys.stderr)
sys.exit(args.exit)
