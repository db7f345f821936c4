"""Runs keyed by the stack fingerprint: no-op reruns, the per-fingerprint cache, re-timing after a library
upgrade and the drift report, on CPU with the hipblaslt backend against the bench double."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from pipeline import procs
from pipeline.problem import GemmProblem
from pipeline.stages.bench.tune import problem_id
from pipeline.stages.bench.tuned_cache import TUNED
from pipeline.stages.run import fingerprint as fpmod

from .helpers import DOUBLE, UNTUNED, first_gemms
from .helpers import run_amd_dag as _amd_run

GEMMS = 4  # of the Llama file's 12: what is tested is the keying, not the count


def _run(tmp_path: Path, run: str, **options):
    return _amd_run(tmp_path, run, untuned=first_gemms(tmp_path, UNTUNED, GEMMS), **options)


def _bench_runs(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "bench.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _pid(result: dict) -> str:
    return problem_id(GemmProblem.from_dict(result["problem"]))


def _summary(tmp_path: Path, run: str) -> dict:
    return json.loads((tmp_path / "w" / run / "bench" / "summary.json").read_text())


def test_the_fingerprint_follows_the_stack_and_the_settings():
    facts = {"platform": "rocm", "arch": "gfx942:sramecc+:xnack-", "torch": "2.11.0", "hipblaslt": "100200"}
    base = fpmod.fingerprint(facts, {"backend": "hipblaslt"})
    assert base.startswith("rocm-gfx942-") and base == fpmod.fingerprint(dict(facts), {"backend": "hipblaslt"})
    assert fpmod.fingerprint({**facts, "hipblaslt": "100300"}, {"backend": "hipblaslt"}) != base
    assert fpmod.fingerprint(facts, {"backend": "hipblaslt", "margin": 0.03}) != base
    assert fpmod.fingerprint({**facts, "probed_at": "ignored"}, {"backend": "hipblaslt"}) == base


def test_the_cheap_signature_sees_the_tool_and_the_environment(tmp_path, monkeypatch):
    tool = tmp_path / "bench"
    tool.write_text("one")
    first = fpmod.signature(str(tool))
    assert fpmod.signature(str(tool)) == first
    tool.write_text("a new build")
    assert fpmod.signature(str(tool)) != first
    second = fpmod.signature(str(tool))
    monkeypatch.setenv("HIPBLASLT_TENSILE_LIBPATH", "/opt/other")
    assert fpmod.signature(str(tool)) != second


def test_claim_moves_another_stacks_directory_aside(tmp_path):
    stage = tmp_path / "bench"
    fpmod.claim(stage, "cuda-sm90-aaa")
    (stage / "summary.json").write_text("{}")
    fpmod.claim(stage, "cuda-sm90-aaa")
    assert (stage / "summary.json").exists(), "the same stack keeps its outputs"
    fpmod.claim(stage, "cuda-sm90-bbb")
    assert not (stage / "summary.json").exists() and fpmod.stamped(stage) == "cuda-sm90-bbb"
    assert (tmp_path / "bench.cuda-sm90-aaa" / "summary.json").exists()


@pytest.mark.long
def test_runs_are_keyed_by_the_fingerprint_cached_and_retimed_after_an_upgrade(tmp_path):
    _run(tmp_path, "night1", rounds=1)
    first = _summary(tmp_path, "night1")
    assert first["origin"]["tuned"] == first["problems"] == GEMMS
    searches = sum("all" in argv for argv in _bench_runs(tmp_path))
    assert searches == GEMMS

    # the same stack, the same shapes: Luigi finds everything complete and nothing runs
    calls = len(_bench_runs(tmp_path))
    start = time.monotonic()
    proc = _run(tmp_path, "night1", rounds=1)
    print(f"no-op rerun: {time.monotonic() - start:.2f} s")
    assert len(_bench_runs(tmp_path)) == calls, "a no-op rerun ran the bench"
    assert (
        "complete ones were encountered" in proc.stderr + proc.stdout
        and "ran successfully" not in proc.stderr + proc.stdout
    )

    # a new run of the same stack takes every tuned problem from the fingerprint's cache, and re-times each
    # cached winner against the default in this run (no search where it still wins): its figure is this run's
    first_winners = {
        r["problem"]["m"] for r in json.loads((tmp_path / "w" / "night1" / "bench" / "results.json").read_text())
        if r["winner"] != "Default"
    }  # fmt: skip
    assert first_winners, "the double's first build has winners to re-time"
    runs_before = len(_bench_runs(tmp_path))
    _run(tmp_path, "night2", rounds=1)
    second = _summary(tmp_path, "night2")
    origin = second["origin"]
    assert origin["cache"] == GEMMS - len(first_winners) and origin["tuned"] == 0
    assert origin["retimed"] + origin["retuned"] == len(first_winners)
    assert sum("all" in a for a in _bench_runs(tmp_path)) == searches + origin["retuned"]
    assert len(_bench_runs(tmp_path)) > runs_before, "the cached winners were timed again"
    caches = sorted(p.name for p in (tmp_path / "w" / TUNED).iterdir())
    assert len(caches) == 1 and caches[0].startswith("rocm-gfx942-")
    assert origin["retimed"], "a winner of the double's first build still wins when timed again"
    for r in json.loads((tmp_path / "w" / "night2" / "bench" / "results.json").read_text()):
        if r["problem"]["m"] in first_winners and r["origin"].startswith("retimed"):
            assert r["origin"].startswith("retimed: the cached winner still wins"), r["origin"]
            cached = json.loads((tmp_path / "w" / TUNED / caches[0] / "problems" / f"{_pid(r)}.json").read_text())
            assert cached["origin"] == r["origin"], "the cache holds the figure this run measured"

    # a library upgrade: a new fingerprint; previous winners are re-timed first, kept or retuned
    _run(tmp_path, "night3", build="7.1", rounds=1)
    third = _summary(tmp_path, "night3")
    results = {
        r["problem"]["m"]: r for r in json.loads((tmp_path / "w" / "night3" / "bench" / "results.json").read_text())
    }
    winners_before = [
        r
        for r in json.loads((tmp_path / "w" / "night1" / "bench" / "results.json").read_text())
        if r["winner"] != "Default"
    ]
    assert winners_before, "the double's first build has winners to re-time"
    assert third["origin"]["retimed"] + third["origin"]["retuned"] == len(winners_before)
    assert third["origin"]["tuned"] == GEMMS - len(winners_before)
    assert len(list((tmp_path / "w" / TUNED).iterdir())) == 2
    for r in results.values():
        if r["origin"].startswith("retimed"):
            assert r["winner"] != "Default" and r["speedup"] >= 1.02
    runs = _bench_runs(tmp_path)
    assert any("index" in argv for argv in runs)
    summary = json.loads((tmp_path / "w" / "night3" / "report" / "summary.json").read_text())
    drift = summary["drift"]
    assert drift["previous_run"] == "night2" and drift["previous_fingerprint"] != drift["fingerprint"]
    assert drift["new_shapes"] == drift["gone_shapes"] == []
    assert "Drift against the previous run" in (tmp_path / "w" / "night3" / "report" / "report.md").read_text()

    # the same run name under a new stack: its stack-bound stages are moved aside and redone
    _run(tmp_path, "night1", build="7.1", rounds=1)
    night1 = tmp_path / "w" / "night1"
    assert fpmod.stamped(night1 / "bench") == summary["fingerprint"]
    aside = [p for p in night1.iterdir() if p.name.startswith("bench.")]
    assert [p.name for p in aside] == [f"bench.{caches[0]}"] and fpmod.stamped(aside[0]) == caches[0]
    again = _summary(tmp_path, "night1")["origin"]
    assert again["tuned"] == 0 and again["cache"] + again["retimed"] + again["retuned"] == GEMMS


def _drift_run(root, name: str, fp: str, kept: list[str], speedups: dict[str, float]):
    run = root / name
    for stage in ("validate", "shapes"):
        (run / stage).mkdir(parents=True)
    (run / "validate" / fpmod.STAMP).write_text(json.dumps({"fingerprint": fp}))
    rows = []
    for key, x in speedups.items():
        stat = {"median_us": 10.0 * x, "p25_us": 10.0 * x, "p75_us": 10.0 * x}
        rows.append(
            {
                "key": key,
                "solution": "Gemm_Hipblaslt_7",
                "op": "gemm",
                "dtype": "float16",
                "layout": "TN",
                "m": 1,
                "n": 2,
                "k": 3,
                "batch": 1,
                "calls": 1,
                "flops": 12,
                "floor_us": 1.0,
                "baseline": stat,
                "tuned": {**stat, "median_us": 10.0, "p25_us": 10.0, "p75_us": 10.0},
            }
        )
    (run / "validate" / "measurements.json").write_text(json.dumps({"rows": rows}))
    (run / "validate" / "gate.json").write_text(
        json.dumps(
            {
                "kept": kept,
                "dropped": [{"key": k, "reason": "x1.010 does not beat the margin"} for k in speedups if k not in kept],
            }
        )
    )
    (run / "shapes" / "shapes.json").write_text(
        json.dumps([{"op_signature": k.split(",")[0], "params_signature": k.split(",")[1]} for k in speedups])
    )
    return run


def test_drift_names_what_changed_and_why_a_row_was_dropped(tmp_path):
    from pipeline.stages.validate.drift import compare

    a, b, c = (
        "GemmTunableOp_Half_TN,tn_1_2_3_ld_3_3_1",
        "GemmTunableOp_Half_TN,tn_4_2_3_ld_3_3_4",
        "GemmTunableOp_Half_TN,tn_5_2_3_ld_3_3_5",
    )
    before = _drift_run(tmp_path, "night1", "fp1", [a, b], {a: 1.20, b: 1.10})
    same = compare(_drift_run(tmp_path, "night2", "fp1", [a], {a: 1.05, b: 1.01, c: 1.0}), before)
    assert [d["key"] for d in same["speedups_shrank"]] == [a] and same["new_shapes"] == [c]
    assert [d["key"] for d in same["dropped"]] == [b] and "same stack" in same["dropped"][0]["why"]
    upgraded = compare(_drift_run(tmp_path, "night3", "fp2", [a], {a: 1.19, b: 1.0}), before)
    assert upgraded["speedups_shrank"] == [] and "library caught up" in upgraded["dropped"][0]["why"]
    assert compare(_drift_run(tmp_path, "night4", "fp2", [], {a: 1.0}), before)["gone_shapes"] == [b]


@pytest.mark.parametrize(("cuda", "imported"), [(None, False), ("13.0", True)])
def test_the_probe_imports_torch_only_for_a_build_that_can_see_a_gpu(tmp_path, cuda, imported):
    # a torch whose import fails loudly: the probe reads a CPU-only build from its version.py and must import a
    # CUDA one (where it asks the GPU)
    package = tmp_path / "site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the probe imported torch')\n")
    (package / "version.py").write_text(f"__version__ = '9.9.0+test'\ncuda: Optional[str] = {cuda!r}\nhip = None\n")
    env = procs.with_package_on_path({**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    out = subprocess.run(procs.worker_argv("stack-probe"), capture_output=True, text=True, env=env)
    if imported:
        assert out.returncode != 0 and "the probe imported torch" in out.stderr
    else:
        assert out.returncode == 0, out.stderr
        facts = json.loads(out.stdout.splitlines()[-1])
        assert (facts["platform"], facts["torch"], facts["cuda"], facts["hip"]) == ("cpu", "9.9.0+test", None, None)


@pytest.mark.parametrize(("cuda", "hip", "bench", "here"), [
    (None, None, False, True),  # no GPU build of torch: read here, no interpreter started
    ("13.0", None, False, False),  # a CUDA build is imported, in a process of its own
    ("13.0", None, True, True),  # an AMD tool beside a CUDA torch: torch is not asked
    (None, "6.4", True, False),  # a ROCm torch with an AMD tool: imported apart
])  # fmt: skip
def test_the_probe_starts_a_process_only_where_it_imports_torch(monkeypatch, cuda, hip, bench, here):
    build = {"torch": "9.9.0+test", "cuda": cuda, "hip": hip}
    monkeypatch.setattr(fpmod, "torch_build", lambda: build)
    started = []

    def child(argv, **_):
        started.append(argv)
        return subprocess.CompletedProcess(argv, 0, json.dumps({"platform": "child"}) + "\n", "")

    monkeypatch.setattr(fpmod.procs, "run", child)
    facts = fpmod.probe(DOUBLE if bench else None)
    assert (started == []) is here and (facts["platform"] == "child") is not here
    if here:
        assert (facts["torch"], facts["cuda"], facts["hip"]) == ("9.9.0+test", cuda, hip)
        assert facts["platform"] == ("rocm" if bench else "cpu") and (facts.get("hipblaslt") is not None) is bench
