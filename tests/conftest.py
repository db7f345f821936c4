from __future__ import annotations

import fcntl
import importlib.util
import os
import sys
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """The doubles (``#!/usr/bin/env python3``) run under the interpreter that runs the tests, its directory
    first on PATH as an activated virtualenv has it: the same packages, and no version manager's shim in front
    of each of a DAG's hundreds of launches."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    sys.dont_write_bytecode = False  # each test process caches its rewritten test modules (3.5 s of collecting)
    if not hasattr(config, "workerinput"):  # once, in the process that starts the others
        _compile_for_children()
    else:
        config.pluginmanager.register(_GroupSuffix(), "gemm-tune-xdist-groups")


class _GroupSuffix:
    """pytest-xdist's ``--dist loadgroup`` tells its scheduler a test's group by appending ``@<group>`` to the
    test's id in each test process; from pytest 9.2 a test's id is a structured value that the write xdist
    3.8 makes no longer reaches, and every group is silently spread over the processes (pytest-xdist issue
    1386; its fix, PR 1388, is not released). After xdist's turn, this writes the same suffix where it did
    not take, and does nothing where it did (pytest <= 9.1, a fixed xdist)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not config.getvalue("loadgroup"):
            return
        for item in items:
            names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in
                     item.iter_markers("xdist_group")}  # fmt: skip
            if names and "@" not in item.nodeid.rsplit("]", 1)[-1]:
                _set_node_id(item, f"{item.nodeid}@{'_'.join(sorted(names))}")


def _set_node_id(item: pytest.Item, nodeid: str) -> None:
    """Give ``item`` the id ``nodeid`` where pytest keeps it: the structured ``_id`` (pytest >= 9.2), else the
    string ``_nodeid`` xdist writes."""
    from _pytest import nodes

    if hasattr(item, "_id") and hasattr(nodes, "coerce_node_id"):
        item._id = nodes.coerce_node_id(nodeid)
    else:
        item._nodeid = nodeid


def _compile_for_children() -> None:
    """Bytecode for the package and the doubles, written once: the tests start hundreds of Python processes
    that import them, and where the environment says ``PYTHONDONTWRITEBYTECODE`` none of those would cache
    what it compiled (a module edited since the last write was compiled again in every process). Children
    still read a cache that exists; ``compileall`` writes it whatever that variable says. The test processes
    write their own (pytest's rewritten test modules) for the same reason: these caches are the suite's, in
    ``__pycache__`` directories git ignores."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for directory in (root / "pipeline", root / "tests" / "doubles"):
        compileall.compile_dir(directory, quiet=2, workers=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a process per core and one more, so a test that waits on its children or a timer (most of
    the DAG tests, at moments) leaves no core idle."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


def _gpu_reason() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (GPU tests run on the device machine with the 'cuda' extra)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA/ROCm GPU visible to torch (GPU tests run on the device machine)"
    return None


def _gpu_group(item: pytest.Item) -> str:
    """A GPU test's xdist group: the one it declares, else its module's (module fixtures stay in one process),
    the tests that share the GPU apart from those that hold it alone (a process busy with one of the latter
    would hold the former back until the GPU's sharers are done)."""
    declared = item.get_closest_marker("xdist_group")
    if declared:
        return f"gpu-{declared.args[0]}"
    return f"gpu-{item.module.__name__}{'-shared' if 'gpu_untimed' in item.keywords else ''}"


def _schedule_rank(item: pytest.Item) -> int:
    """The processes take work in collection order: first the long tests that do not hold the GPU alone (so
    that none starts late and runs on alone at the end, and the CPU-heavy ones are done before the GPU is
    timed), then the other GPU tests that share the GPU (they run side by side; one queued behind a test that
    holds the GPU alone would wait for it and then run alone too: 21 s on the H100), then the CPU tests, last
    those that hold the GPU alone, the long ones first (one at a time, once the GPU's sharers are done)."""
    gpu, untimed, long = "gpu" in item.keywords, "gpu_untimed" in item.keywords, "long" in item.keywords
    if gpu and not untimed:
        return 3 if long else 4
    return 0 if long else 1 if gpu else 2


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether a test uses a module-scoped fixture of ours: its module's tests then run in one process, which
    builds the fixture once (spread over three, a fixture of three CPU DAG runs was built two or three times)."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(d.scope == "module" for chain in defs.values() for d in chain)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_schedule_rank)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.xdist_group(_gpu_group(item)))  # groups spread over the processes
        elif _shares_a_module_fixture(item) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(f"module-{item.module.__name__}"))
    if not any("gpu" in item.keywords for item in items):
        return
    reason = _gpu_reason()
    if reason:
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """The GPU, shared between the test processes as a readers-writer lock around each GPU test (its fixtures'
    set-up and tear-down included): a ``gpu`` test holds it alone, so what it times or asserts of timings
    sees no other test's work; a ``gpu_untimed`` test measures nothing and shares it with the other such.
    (A gate that let a waiting ``gpu`` test close the lock to later sharers made the H100 run slower, 263 s
    against 222 s: the sharers then ran in smaller batches.)"""
    if "gpu" not in item.keywords:
        yield
        return
    # in the directory the run's processes share under pytest's own temporary root (which pytest prunes)
    path = item.config._tmp_path_factory.getbasetemp().parent / "gemm-tune-gpu.lock"
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH if "gpu_untimed" in item.keywords else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _own_written_record(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test keeps the record of the files gemm-tune wrote (``atomic.written_record``) to itself, never the
    user's: commands it runs, in process or as children, replace only what that test's commands wrote."""
    monkeypatch.setenv("GEMM_TUNE_STATE_DIR", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(autouse=True)
def _own_gpu_locks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """A CPU test's runs take their GPU slots (``backends.slots``) in a lock directory of the test's own, not the
    machine-wide one: tests running side by side, or a user's run on the same machine, never wait on each other's
    pretend GPUs (half-second polls). A GPU test keeps the machine's, which guards the real device; a test that
    shares locks between its runs sets its own directory over this one."""
    if "gpu" not in request.keywords:
        monkeypatch.setenv("GEMM_TUNE_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
