"""What each recorded GEMM costs the workload: how often it runs, times its baseline time per call.

Record mode lists every distinct GEMM once, so the untuned file cannot say which ones matter. Two facts
are learnt during collection instead:

* **Calls.** The workload runs with ``PYTORCH_TUNABLEOP_VERBOSE=3`` on stderr. TunableOp looks every GEMM
  call up in its results (``TuningResultsManager::Lookup`` in ``aten/src/ATen/cuda/tunable/Tunable.cpp``)
  and at level 3 logs each lookup: ``missing op_signature, returning null ResultEntry for <op>,<params>``
  (record mode loads no results file, so every call misses; ``missing params_signature, ...`` and
  ``ResultEntry found for ...`` are counted the same way). This is libtorch's own C++ log, so it counts the
  calls of any process of the workload, Python or not, on every GPU, with torch's exact keys. Collection
  strips those lines from the stderr log it keeps. A workload that swallows its stderr leaves no count:
  each recorded line then counts as one call, and the notes say so. Under CUDA graphs a GEMM is looked up
  only when its graph is captured: the workload's processes mark each capture and count each graph's
  replays on the same stream (``runtime.graphs``), and a lookup inside a capture counts once per replay.
* **Baseline time per call.** After the workload, each distinct GEMM is timed once with torch's default
  call through the shared harness (``python -m pipeline.stages call-weights DIR --gpus 0,1``). GEMMs the harness
  cannot run (scaled or wildcard keys) get their roofline floor, with a note.

``time_share`` of a GEMM = calls x time per call, over the sum for all GEMMs: its share of the workload's
GEMM time at baseline speed. The gate, the report and TuneWorkload weigh by it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ... import procs
from ...atomic import atomic_write_json
from ...backends.slots import gpu_slot, lock_dir
from ...errors import ToolError
from ...runtime.graphs import add_replayed, parse_marker

CALLS = "calls.json"
BASELINE = "baseline.json"
VERBOSE_ENV = {"PYTORCH_TUNABLEOP_VERBOSE": "3", "PYTORCH_TUNABLEOP_VERBOSE_FILENAME": "err"}
_NO_RESULT = "no result, using default"  # TunableOp's line after each lookup that found nothing
_LOOKUP = re.compile(r"(?:returning null ResultEntry for|ResultEntry found for) (?P<key>\S+?,\S+?)\s*$")


def lookup_key(line: str) -> str | None:
    """The ``<op>,<params>`` key of a TunableOp lookup log line, or None for any other line."""
    if "ResultEntry" not in line:
        return None
    match = _LOOKUP.search(line)
    return match["key"] if match else None


def split_stderr(lines: Iterable[str], calls: Counter) -> Iterable[str]:
    """Count lookup lines into ``calls``; yield the workload's own stderr, without TunableOp's per-call
    chatter (``no result, using default`` after each lookup, ``Untuned,<key>`` at each first record) and
    without the graph markers. A lookup inside a capture counts once per replay of its graph (added when
    the lines end: the replays are written at exit)."""
    capturing: str | None = None
    captured: dict[str, Counter] = {}
    replays: Counter = Counter()
    for line in lines:
        key = lookup_key(line)
        if key is not None:
            if capturing is None:
                calls[key] += 1
            else:
                captured.setdefault(capturing, Counter())[key] += 1
            continue
        marker = parse_marker(line)
        if marker is not None:
            graph, what, count = marker
            if what == "replayed":
                replays[graph] += count
            else:
                capturing = graph if what == "begin" else None
        elif not (line.startswith("Untuned,") or line.rstrip() == _NO_RESULT):
            yield line
    add_replayed(calls, captured, replays)


def calls_record(calls: Mapping[str, int]) -> dict:
    """What ``calls.json`` holds: the per-key call counts and where they came from."""
    if calls:
        return {
            "source": "TunableOp lookup log (PYTORCH_TUNABLEOP_VERBOSE=3)",
            "total": sum(calls.values()),
            "calls": dict(sorted(calls.items())),
        }
    return {
        "source": None,
        "total": 0,
        "calls": {},
        "note": "the workload's stderr held no TunableOp lookup line (a non-Python program that does not "
        "load libtorch, or a workload that redirects its stderr), so each recorded GEMM counts as "
        "one call",
    }


def time_shares(
    keys: Sequence[str], calls: Mapping[str, int] | None, per_call_us: Mapping[str, float | None]
) -> tuple[dict[str, int], dict[str, float | None]]:
    """Calls and time share of every key. A key with no count counts once; without a time per call for
    every key (no baseline timing ran) there are no shares."""
    counted = {key: (calls or {}).get(key, 0) or 1 for key in keys}
    if not keys or any(per_call_us.get(key) is None for key in keys):
        return counted, dict.fromkeys(keys)
    cost = {key: counted[key] * float(per_call_us[key]) for key in keys}  # type: ignore[arg-type]
    total = sum(cost.values())
    return counted, {key: (cost[key] / total if total > 0 else 1.0 / len(keys)) for key in keys}


def time_baseline(keys: Sequence[str], gpu: int, rounds: int = 3) -> dict:
    """torch's default time per call of every key on GPU ``gpu`` (imports torch; run in a worker)."""
    import torch

    from ...backends.measure import TimingSettings, device_info, interleaved, rotating_operands
    from ...formats.tunableop import parse_key
    from ...kernels.support import unsupported_reason
    from ...kernels.torch_gemm import torch_launcher

    device = torch.device("cuda", gpu)
    torch.cuda.set_device(device)
    timing = TimingSettings(rounds=rounds)
    per_call, notes = {}, {}
    for key in keys:
        problem = parse_key(*key.split(",", 1))
        reason = unsupported_reason(problem)
        if reason:
            per_call[key] = None if problem.is_wildcard else problem.floor_us(torch.cuda.get_device_name(device))
            notes[key] = f"not timed ({reason}): " + ("no time" if problem.is_wildcard else "roofline floor used")
            continue
        sets = rotating_operands(problem, device, timing)
        per_call[key] = interleaved(problem, {"baseline": torch_launcher(problem)}, sets, timing)["baseline"].median
        del sets
        torch.cuda.empty_cache()
    return {"device": device_info(device), "per_call_us": per_call, "notes": notes}


def run_worker(directory: Path, keys: Sequence[str], gpus: Sequence[int], rounds: int = 3) -> dict:
    """Time ``keys`` in ``python -m pipeline.stages call-weights``, which claims a free GPU slot of ``gpus``
    itself (the caller never initialises CUDA); writes and returns ``DIR/baseline.json``. The worker runs
    without TunableOp variables, so the baseline is torch's default call."""
    directory = Path(directory).absolute()
    atomic_write_json(directory / "baseline-keys.json", list(keys))
    env = {k: v for k, v in procs.with_package_on_path(os.environ).items() if not k.startswith("PYTORCH_TUNABLEOP_")}
    argv = procs.worker_argv("call-weights", directory, "--gpus", ",".join(map(str, gpus)), "--rounds", rounds)
    proc = procs.run(argv, env=env)
    if proc.returncode != 0:
        raise ToolError(
            f"baseline timing of the recorded GEMMs exited with code {proc.returncode}:\n"
            f"{procs.tail_lines(proc.stderr, 15)}"
        )
    return json.loads((directory / BASELINE).read_text())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time torch's default call of each recorded GEMM.")
    parser.add_argument("directory", help="collection directory holding baseline-keys.json")
    parser.add_argument("--gpus", default="0", help="GPUs it may use; it claims a free one's slot itself")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    directory = Path(args.directory)
    keys = json.loads((directory / "baseline-keys.json").read_text())
    with gpu_slot(lock_dir(), [int(g) for g in args.gpus.split(",")]) as gpu:
        atomic_write_json(directory / BASELINE, time_baseline(keys, gpu, args.rounds))
    return 0
