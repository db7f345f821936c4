"""bench/gemv_grid.py's grid, on CPU: the one-token configs it times, and how it reads Inductor's pick."""

from __future__ import annotations

import json

from .helpers import bench_module


def test_the_grid_holds_one_token_configs_within_its_bounds():
    configs = bench_module("gemv_grid").grid()
    assert len(configs) == len({c.name for c in configs})
    for c in configs:
        assert c.family == "gemv" and c.split_k == 1
        assert 2 * c.num_warps * 32 <= c.block_c * c.block_k <= min(8192, 16 * c.num_warps * 32), c.name
    assert {c.block_c for c in configs} == {1, 2, 4} and {c.num_stages for c in configs} == {1, 2, 3}


def test_inductors_pick_is_the_best_config_written_during_the_call(tmp_path):
    gg = bench_module("gemv_grid")
    (tmp_path / "old.best_config").write_text(json.dumps({"XBLOCK": 8, "num_warps": 2}))

    def compile_call():
        (tmp_path / "ab").mkdir()
        (tmp_path / "ab" / "k.best_config").write_text(
            json.dumps({"XBLOCK": 1, "R0_BLOCK": 1024, "num_warps": 16, "num_stages": 1, "configs_hash": "x"})
        )

    assert gg.inductor_pick(str(tmp_path), compile_call) == [
        {"XBLOCK": 1, "R0_BLOCK": 1024, "num_warps": 16, "num_stages": 1}
    ]
