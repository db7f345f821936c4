"""A backend is one module and one registry entry: its Luigi parameters, their checks, the fingerprint's
settings, Bench's record of what it was made from, the help and the workers all come from the entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from .helpers import ROOT

TOY = '''
from pipeline.backends.base import BackendBase, CandidateResult, ProblemResult, WinnerRecord


class ToyBackend(BackendBase):
    """Crowns a made-up winner whose speedup is its ``depth`` option: what the worker was given shows."""

    name = "toy"

    def __init__(self, gpu, depth):
        self.depth = depth

    def tune_one(self, problem, settings):
        result = ProblemResult(problem, default_us=10.0, winner_us=10.0)
        result.crown(f"Toy_{self.depth}", 10.0 / self.depth, WinnerRecord({"Depth": self.depth}))
        result.candidates = [CandidateResult(f"Toy_{self.depth}", final_us=10.0 / self.depth)]
        return result


def factory(gpu, **options):
    return ToyBackend(gpu, **options)
'''

SCRIPT = """
import json, sys
from pipeline.stages.bench import registry
import toy_backend

toy = registry.BackendEntry(  # the one entry
    "toy", "either", "tuner", toy_backend.factory,
    options=lambda params: {"depth": params["toy_depth"]},
    settings={"depth": "toy_depth"},
    parameters={"toy_depth": registry.Param(int, 2, "toy: how deep it searches", low=1, high=8)},
)
registry.REGISTRY["toy"] = toy

from pathlib import Path
import pipeline.tasks as tasks
from pipeline.backends.base import TuneSettings
from pipeline.dag.arguments import BadArguments, check_parameters
from pipeline.problem import GemmProblem
from pipeline.stages.bench.tune import result_path, run_shards

out = {}
check_parameters("TuneWorkload", ["--backend", "toy", "--toy-depth", "3"])
try:
    check_parameters("TuneWorkload", ["--backend", "toy", "--toy-depth", "9"])
except BadArguments as err:
    out["refused"] = str(err)
bench = tasks.Bench(backend="toy", toy_depth=3, workdir=sys.argv[1], run_name="r")
out["fingerprint_settings"] = bench.tuning_settings()
out["options"] = bench.backend_options()
out["made_from"] = "toy_depth" in tasks.BENCH_PARAMS and "toy_depth" in dict(tasks.Validate.get_params())
problem = GemmProblem("gemm", "T", "N", 64, 8, 64, 64, 64, 64)
run_shards([problem], Path(sys.argv[1]) / "bench", [0], TuneSettings(), toy.factory_path, None, bench.backend_options())
out["winner"] = json.loads(result_path(Path(sys.argv[1]) / "bench", problem).read_text())["winner"]
print(json.dumps(out))
"""


def test_a_backend_is_one_module_and_one_registry_entry(tmp_path):
    (tmp_path / "toy_backend.py").write_text(TOY)
    (tmp_path / "script.py").write_text(SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks"),
    }
    done = subprocess.run(
        [sys.executable, str(tmp_path / "script.py"), str(tmp_path / "w")],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "--toy-depth '9'" in out["refused"]  # its bounds, checked before any work
    assert out["fingerprint_settings"]["depth"] == 3 and out["fingerprint_settings"]["backend"] == "toy"
    assert out["options"] == {"depth": 3} and out["made_from"]
    assert out["winner"] == "Toy_3"  # the worker built the backend from the entry's factory and options
    entry_only = textwrap.dedent(SCRIPT.split("from pathlib")[0])  # the entry, then Luigi's help
    show_help = (
        "import pipeline.tasks, luigi.cmdline\n"
        "luigi.cmdline.luigi_run(['--module', 'pipeline', 'TuneWorkload', '--help'])"
    )
    argv = [sys.executable, "-c", entry_only + show_help]
    help_text = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert "--toy-depth" in help_text.stdout and "toy: how deep it searches (int in [1, 8]; default: 2)" in " ".join(
        help_text.stdout.split()
    )
