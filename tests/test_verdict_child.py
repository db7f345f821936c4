"""The verdict process's client (``pipeline.backends.verdict_child``) against doubles of the child that speak
its protocol: answers, refusals (the child exits; the next request starts another), deaths, silence and
garbage each end as ``VerdictChildError`` naming what happened, never as a hang or a wrong answer."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest

from pipeline.backends.verdict_child import VerdictChild, VerdictChildError, request_of
from pipeline.formats.tunableop import parse_key
from pipeline.problem import GemmProblem

DOUBLE = r"""
import json, os, sys, time
mode = sys.argv[1]
print("noise a library printed", file=sys.stderr)
if mode == "dies-starting":
    sys.exit(7)
print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if mode == "silent":
        time.sleep(60)
    if mode == "garbage":
        print("Triton autotuning for function ...", flush=True)
        continue
    if mode == "dies" or request["config"] == "crash":
        os._exit(9)
    if request["config"] == "bad":
        print(json.dumps({"error": "cuBLASLtError: NOT_SUPPORTED"}), flush=True)
        sys.exit(1)
    rounds = request["rounds"]
    print(json.dumps({"samples": {"default": [2.0] * rounds, "winner": [1.0] * rounds}, "pid": os.getpid()}),
          flush=True)
"""


def child(mode: str, timeout_s: float = 30.0) -> VerdictChild:
    return VerdictChild([sys.executable, "-c", DOUBLE, mode], answer_timeout_s=timeout_s)


def request(config: str = "good", rounds: int = 3) -> dict:
    return {"problem": {}, "config": config, "timing": {}, "rounds": rounds, "workspace_bytes": 0}


def test_one_child_answers_every_request_in_turn():
    verdicts = child("answers")
    try:
        first = verdicts.ask(request(rounds=3))
        second = verdicts.ask(request(rounds=5))
        assert first["samples"] == {"default": [2.0] * 3, "winner": [1.0] * 3}
        assert len(second["samples"]["winner"]) == 5
        assert first["pid"] == second["pid"] != os.getpid() and verdicts.started == 1
    finally:
        verdicts.close()
    assert verdicts.proc is None


def test_a_refused_verdict_raises_with_the_childs_reason_and_the_next_request_gets_a_new_child():
    verdicts = child("answers")
    try:
        first = verdicts.ask(request())["pid"]
        with pytest.raises(VerdictChildError, match="refused it: cuBLASLtError: NOT_SUPPORTED"):
            verdicts.ask(request("bad"))
        assert verdicts.proc is None, "the refusing child was reaped"
        again = verdicts.ask(request())
        assert again["pid"] != first and verdicts.started == 2
    finally:
        verdicts.close()


@pytest.mark.parametrize(
    ("mode", "config", "says"),
    [
        ("dies-starting", "good", "exited with code 7 while starting"),
        ("answers", "crash", "exited with code 9 while timing a verdict"),
    ],
)
def test_a_child_that_dies_is_an_error_naming_its_exit_code(mode, config, says):
    verdicts = child(mode)
    try:
        with pytest.raises(VerdictChildError, match=says):
            verdicts.ask(request(config))
    finally:
        verdicts.close()


def test_a_silent_child_is_killed_after_the_time_out():
    verdicts = child("silent", timeout_s=0.5)
    with pytest.raises(VerdictChildError, match="no answer within 0 s timing a verdict: killed"):
        verdicts.ask(request())
    assert verdicts.proc is None


def test_a_child_that_writes_other_than_json_is_killed():
    verdicts = child("garbage")
    with pytest.raises(VerdictChildError, match=r"'Triton autotuning.*not a JSON line"):
        verdicts.ask(request())
    assert verdicts.proc is None


def test_the_request_carries_the_problem_and_timing_as_json():
    problem = parse_key("GemmTunableOp_BFloat16_TN", "tn_14336_1_4096_ld_4096_4096_14336")
    sent = json.loads(json.dumps(request_of(problem, {"AlgoId": 6}, Timing(), 14, 1 << 25)))
    assert sent["timing"] == {"seed": 3, "warmup_ms": [200.0, 1000.0]} and sent["rounds"] == 14
    assert sent["config"] == {"AlgoId": 6} and sent["workspace_bytes"] == 1 << 25
    assert GemmProblem.from_dict(sent["problem"]) == problem


@dataclasses.dataclass(frozen=True)
class Timing:  # as ``measure.TimingSettings``: a frozen dataclass, a tuple among its fields
    seed: int = 3
    warmup_ms: tuple[float, float] = (200.0, 1000.0)
