"""The read floors measured on the H100 (bench/results/decode_floor_*.json) and their analysis against the
decode GEMMs of bench/results/decode_hbm_*.json, on CPU, as ``bench/decode_floor.py analyse`` runs it."""

from __future__ import annotations

import json
import re

import pytest

from .helpers import ROOT, bench_module

FLOORS = ROOT / "bench" / "results" / "decode_floor_h100_2026-11-26.json"
DECODE = ROOT / "bench" / "results" / "decode_hbm_h100_2026-11-25.json"


@pytest.fixture(scope="module")
def floor():
    return bench_module("decode_floor")


@pytest.fixture(scope="module")
def runs():
    return json.loads(FLOORS.read_text())["runs"]


def test_each_floor_is_its_bytes_over_the_runs_bandwidth_and_time(runs):
    for run in runs:
        limit = run["copy_bandwidth_bytes_per_s"]
        for f in run["floors"]:
            assert f["read_frac"] == pytest.approx(f["bytes"] / limit / f["read_us"] * 1e6)
            assert f["copy_frac"] == pytest.approx(2 * f["bytes"] / limit / f["copy_us"] * 1e6)
            assert f["read_config"].startswith("read_b")


def test_the_floor_is_interpolated_between_sizes_and_flat_beyond(floor):
    points = [{"bytes": 1_000, "read_frac": 0.5}, {"bytes": 100_000, "read_frac": 0.9}]
    assert floor.floor_at(points, 10) == 0.5
    assert floor.floor_at(points, 1_000) == 0.5
    assert floor.floor_at(points, 10_000) == pytest.approx(0.7)  # halfway on a log scale
    assert floor.floor_at(points, 100_000) == pytest.approx(0.9)
    assert floor.floor_at(points, 10**9) == 0.9


def test_smaller_launches_reach_less_of_the_limit(runs):
    last = sorted(runs[-1]["floors"], key=lambda f: f["bytes"])
    fractions = [f["read_frac"] for f in last]
    assert fractions == sorted(fractions)
    assert fractions[0] < 0.85 < fractions[-1]  # 17 MB against 117 MB


def test_the_analysis_divides_each_method_by_the_floor_at_its_bytes(floor, runs):
    decode = json.loads(DECODE.read_text())["rows"]
    report = floor.analyse(runs[-1]["floors"], decode)
    assert report["geomean"]["all"]["gemms"] == len(decode) == len(report["rows"])
    for row, measured in zip(report["rows"], decode, strict=True):
        expected = floor.floor_at(runs[-1]["floors"], measured["bytes"])
        assert row["read_floor"] == pytest.approx(expected, abs=1e-4)
        for method, fraction in measured["hbm"].items():
            assert row["of_floor"][method] == pytest.approx(fraction / expected, abs=2e-4)
    models = {r["model"] for r in decode}
    assert set(report["geomean"]) == {"all", *models}


KERNELS = ROOT / "pipeline" / "kernels" / "triton_kernels.py"


def _loads(source: str, kernel: str) -> list[str]:
    """The X and Y load lines of ``kernel`` in ``source``."""
    body = next(part for part in source.split("@triton.jit\n") if part.startswith(f"def {kernel}("))
    return [line.strip() for line in body.splitlines() if "tl.load(xp" in line or "tl.load(yp" in line]


def test_the_shipped_gemv_streams_its_weights_evict_first_and_keeps_the_activation(floor):
    source = KERNELS.read_text()
    gemv = _loads(source, "gemv")
    assert len(gemv) == 4  # whole K tiles and the masked last one
    assert all('eviction_policy="evict_first"' in line for line in gemv if "tl.load(yp" in line)
    assert all('eviction_policy="evict_last"' in line for line in gemv if "tl.load(xp" in line)
    assert not any("eviction_policy" in line for line in _loads(source, "gemm"))  # measured: no gain there
    assert floor.with_policies(source, "gemv", True) == source  # the probe's "with" is what ships


def test_the_probe_strips_or_adds_the_policies_of_one_kernel_alone(floor):
    source = KERNELS.read_text()
    plain = floor.with_policies(source, "gemv", False)
    assert not any("eviction_policy" in line for line in _loads(plain, "gemv"))
    assert _loads(plain, "gemm") == _loads(source, "gemm")
    gemm = floor.with_policies(source, "gemm", True)
    assert [line for line in _loads(gemm, "gemm") if "evict_first" in line and "tl.load(yp" in line]
    assert [line for line in _loads(gemm, "gemm") if "evict_last" in line and "tl.load(xp" in line]
    assert _loads(gemm, "gemv") == _loads(source, "gemv")
    compile(floor.with_policies(source, "gemm", True), "policy_kernels.py", "exec")  # still Python


def test_rows_configs_hold_every_token_in_one_row_tile(floor):
    from pipeline.problem import GemmProblem

    assert floor.rows_configs(GemmProblem("gemm", "T", "N", 4096, 1, 4096, 4096, 4096, 4096)) == []
    for tokens, tile in ((3, 4), (4, 4), (5, 8), (8, 8)):
        problem = GemmProblem("gemm", "T", "N", 3584, tokens, 3584, 3584, 3584, 3584)
        found = floor.rows_configs(problem)
        assert found
        for c in found:
            assert c.block_r == tile and c.split_k == 1 and 3584 % c.block_k == 0
            threads = 32 * c.num_warps
            assert 2 * threads <= c.block_c * c.block_k <= 16 * threads
            assert c.block_r * c.block_c * c.block_k <= 64 * threads


def test_the_load_policy_records_time_each_config_with_and_without(floor):
    for name in ("decode_floor_evict_t1_h100_2026-11-26.json", "decode_floor_evict_t48_h100_2026-11-26.json"):
        record = json.loads((ROOT / "bench" / "results" / name).read_text())
        assert record["args"]["evict"] and record["rows"]
        for row in record["rows"]:
            plain = [n.removeprefix("plain:") for n in row["fraction"] if n.startswith("plain:")]
            assert len(plain) == 3
            assert all("evict:" + n in row["fraction"] for n in plain)
            assert all(n in row["fraction"] for n in plain)  # each is one of the product's own finalists


def test_the_decode_hbm_record_of_all_45_holds_its_geomeans_and_misses():
    from pipeline.stats import geomean

    record = json.loads((ROOT / "bench" / "results" / "decode_hbm_h100_2026-11-26.json").read_text())
    rows = record["rows"]
    assert len({(r["model"], r["gemm"], r["tokens"]) for r in rows}) == len(rows) == 45
    assert sum(part["rows"] for part in record["parts"]) == 45
    for method, value in record["geomean_hbm_fraction"]["all"].items():
        assert value == pytest.approx(geomean(r["hbm"][method] for r in rows), abs=1e-4)
    fp8 = [r for r in rows if r["model"].endswith("-fp8")]
    assert record["geomean_hbm_fraction"]["llama3-8b-fp8"]["product"] == pytest.approx(
        geomean(r["hbm"]["product"] for r in fp8), abs=1e-4
    )
    misses = [
        f"{r['model']} {r['gemm']} T={r['tokens']}"
        for r in rows
        if r["hbm"]["product"] < 0.99 * max(r["hbm"]["cublaslt"], r["hbm"]["max_autotune"])
    ]
    assert record["product_below_best_rival_by_1pct"] == misses


def test_the_retimed_record_divides_each_time_by_the_copy_and_by_the_better_of_copy_and_read():
    """decode_hbm.py --winners-from: every row's fractions are its bytes over its times at the run's two limits,
    its winners those of the record it names, and the geomeans and the summary are those of its rows."""
    from pipeline.stats import geomean

    record = json.loads((ROOT / "bench" / "results" / "decode_hbm_h100_2026-11-27_retimed.json").read_text())
    source = json.loads((ROOT / "bench" / "results" / record["runs"][0]["winners_from"]).read_text())
    winners = {(r["model"], r["gemm"], r["tokens"]): r["winners"] for r in source["rows"]}
    assert len(record["runs"]) == 3
    for run in record["runs"]:
        copy, read = run["copy_bandwidth_bytes_per_s"], run["read_bandwidth_bytes_per_s"]
        rows = run["rows"]
        assert len(rows) == 45 and all(winners[(r["model"], r["gemm"], r["tokens"])] == r["winners"] for r in rows)
        for row in rows:
            for method, us in row["us"].items():
                for field, limit in (("hbm_copy", copy), ("hbm_better", max(copy, read))):
                    assert row[field][method] == pytest.approx(row["bytes"] / limit * 1e6 / us, rel=2e-3)
        for field in ("hbm_copy", "hbm_better"):
            assert run["geomean"][field]["all"]["product"] == pytest.approx(
                geomean(r[field]["product"] for r in rows), abs=1e-4
            )
    for field in ("hbm_copy", "hbm_better"):
        assert record["product_geomean"][field] == [
            round(r["geomean"][field]["all"]["product"], 4) for r in record["runs"]
        ]
    assert min(record["product_geomean"]["hbm_copy"]) >= 0.90  # #36's target against its own limit, every run


def test_the_constant_k_variant_compiles_gemv_alone_for_one_k(floor):
    source = KERNELS.read_text()
    variant = floor.with_constant_k(source)
    gemv = next(part for part in variant.split("@triton.jit\n") if part.startswith("def gemv("))
    assert "K: tl.constexpr, K_PER: tl.constexpr," in gemv
    assert "k0 = pk * K_PER if SPLIT > 1 else 0" in gemv
    gemm = next(part for part in variant.split("@triton.jit\n") if part.startswith("def gemm("))
    assert gemm in source  # the other kernels as they ship
    compile(variant, "variant_kernels.py", "exec")


def test_a_variant_of_a_kernel_that_changed_is_an_error_not_the_source_again(floor):
    with pytest.raises(ValueError, match="with_constant_k needs updating"):
        floor.with_constant_k("@triton.jit\ndef gemv(x, K):\n    pass\n")
    with pytest.raises(ValueError, match="gemm: 0 Triton kernels"):
        floor.with_policies("@triton.jit\ndef gemv(x):\n    pass\n", "gemm", True)


def test_persistent_configs_are_the_swapped_tiles_where_they_outnumber_the_programs(floor):
    from pipeline.kernels.triton_gemm import SHARED_BYTES
    from pipeline.problem import TENSORWISE_E4M3, GemmProblem

    def problem(m, k, tokens=4, fp8=False):
        fields = ("scaled_gemm", TENSORWISE_E4M3) if fp8 else ("gemm", {})
        return GemmProblem(fields[0], "T", "N", m, tokens, k, k, k, m, **fields[1])

    assert floor.persist_configs(problem(28672, 4096, tokens=1), 132) == []  # one token: gemv's
    assert floor.persist_configs(problem(4096, 14336), 132) == []  # 64 tiles of 64 columns: fewer than the SMs
    found = floor.persist_configs(problem(28672, 4096, fp8=True), 132)
    assert {flat for *_, flat in found} == {False, True}
    assert {p for _, p, _ in found} == {132, 264}
    for c, programs, _ in found:
        assert c.swapped and c.split_k == 1 and 4096 % c.block_k == 0
        assert programs < -(-28672 // c.block_c)
        assert c.num_stages * (16 + c.block_c) * c.block_k <= SHARED_BYTES
    narrow = floor.persist_configs(problem(12288, 4096), 132)  # 96 tiles of 128 columns, 192 of 64
    assert {c.block_c for c, p, _ in narrow if p == 132} == {64}
    assert floor.persist_configs(problem(12288, 4000), 132) == []  # no K tile divides K


def test_the_persistent_grid_record_loses_to_the_product_s_swapped_tile_on_every_gemm():
    record = json.loads((ROOT / "bench" / "results" / "decode_floor_persist_h100_2026-11-27.json").read_text())
    assert record["args"]["families"] == ["swapped", "persist"] and len(record["rows"]) == 5
    for row in record["rows"]:
        best = {
            family: max(v for n, v in row["fraction"].items() if n.startswith(prefix))
            for family, prefix in (("product", "triton_"), ("persist", "persist"), ("flat", "flat"))
        }
        assert best["product"] > max(best["persist"], best["flat"]) > row["fraction"]["default"]
        assert max(row["relative_error"].values()) < 2e-2


def test_swapfix_configs_split_the_swapped_tiles_into_whole_k_tiles(floor):
    from pipeline.kernels.triton_gemm import SHARED_BYTES
    from pipeline.problem import TENSORWISE_E4M3, GemmProblem

    def problem(m, k, tokens=4, fp8=False):
        fields = ("scaled_gemm", TENSORWISE_E4M3) if fp8 else ("gemm", {})
        return GemmProblem(fields[0], "T", "N", m, tokens, k, k, k, m, **fields[1])

    assert floor.swapfix_configs(problem(4096, 4096, tokens=1), 132) == []  # one token: gemv's
    for fp8 in (False, True):
        found = floor.swapfix_configs(problem(3584, 3584, fp8=fp8), 132)
        assert {c.split_k for c in found} == {2, 3, 4}
        for c in found:
            assert c.swapped and 3584 % c.block_k == 0 and 3584 // c.block_k >= 2 * c.split_k
            assert c.num_stages * (16 + c.block_c) * c.block_k * (1 if fp8 else 2) <= SHARED_BYTES
    assert floor.swapfix_configs(problem(4096, 4000), 132) == []  # no K tile divides K


def test_the_swapfix_record_loses_to_the_unsplit_swapped_tile_wherever_both_were_timed():
    record = json.loads((ROOT / "bench" / "results" / "decode_floor_swapfix_h100_2026-11-27.json").read_text())
    rows = [row for run in record["runs"] for row in run["rows"]]
    assert len(rows) == 18 and all(run["args"]["families"] == ["swapped", "swapfix"] for run in record["runs"])
    for row in rows:
        fraction = row["fraction"]
        fixup = max(v for n, v in fraction.items() if n.startswith("swapfix:"))
        unsplit = [v for n, v in fraction.items() if n.startswith("triton_") and "_s1_" in n]
        split = [v for n, v in fraction.items() if n.startswith("triton_") and "_s1_" not in n]
        assert unsplit or split
        if unsplit:
            assert max(unsplit) > fixup
        if split:  # the same split, reduced by a second kernel: within 1%
            assert fixup == pytest.approx(max(split), rel=0.01)
        assert max(row["relative_error"].values()) < 2e-2


def test_the_unfused_projections_are_the_hf_models_gate_and_up(floor):
    from pipeline.workloads.hf import ARCHS

    for model, name, n_out, k in floor.UNFUSED:
        kw = ARCHS[model]["kw"]
        assert name == "gate" and (n_out, k) == (kw["intermediate_size"], kw["hidden_size"])
    fused = {(m, n_out) for m, g, n_out, _ in floor.LARGE if g == "gate_up"}
    assert fused == {(m, 2 * n_out) for m, _, n_out, _ in floor.UNFUSED}


def test_the_unfused_record_finds_no_family_beyond_the_products_space_by_benchs_margin():
    record = json.loads((ROOT / "bench" / "results" / "decode_floor_unfused_h100_2026-11-27.json").read_text())
    rows = [row for run in record["runs"] for row in run["rows"]]
    assert {(r["model"], r["dtype"], r["tokens"]) for r in rows} == {
        *((m, d, t) for m in ("llama3-8b", "qwen2-7b") for d in ("bf16",) for t in (1, 4, 8)),
        *(("llama3-8b", "fp8", t) for t in (1, 4, 8)),
    }
    for row in rows:
        fraction = row["fraction"]
        product = max(v for n, v in fraction.items() if n.startswith("triton_"))
        others = [v for n, v in fraction.items() if n != "default" and not n.startswith("triton_")]
        assert others and max(others) < 1.02 * product  # never by the margin Bench asks
        assert product > fraction["default"]
        assert max(row["relative_error"].values()) < 2e-2


def test_the_floor_kernels_take_torchs_scale_b_for_x_and_scale_a_for_y(floor):
    from types import SimpleNamespace

    out, a, b = object(), object(), object()
    assert floor.scale_args(SimpleNamespace(scale_a=a, scale_b=b), out) == (True, b, a)
    assert floor.scale_args(SimpleNamespace(scale_a=None, scale_b=None), out) == (False, out, out)


def _problem(m, k, tokens=4, fp8=False):
    from pipeline.problem import TENSORWISE_E4M3, GemmProblem

    fields = ("scaled_gemm", TENSORWISE_E4M3) if fp8 else ("gemm", {})
    return GemmProblem(fields[0], "T", "N", m, tokens, k, k, k, m, **fields[1])


def test_longk_configs_are_swapped_tiles_of_long_k_that_fit_the_shared_memory(floor):
    from pipeline.kernels.triton_gemm import SHARED_BYTES

    assert floor.longk_configs(_problem(4096, 4096, tokens=1)) == []
    for fp8 in (False, True):
        found = floor.longk_configs(_problem(4096, 4096, fp8=fp8))
        assert found and {c.block_k for c in found} <= {512, 1024}
        for c in found:
            assert c.swapped and c.split_k == 1 and 4096 % c.block_k == 0 and c.num_stages >= 2
            assert c.num_stages * (16 + c.block_c) * c.block_k * (1 if fp8 else 2) <= SHARED_BYTES
    assert {c.block_k for c in floor.longk_configs(_problem(3584, 3584, fp8=True))} == {512}  # 1024 does not divide


def test_narrow_configs_are_swapped_tiles_of_16_or_32_columns_over_whole_k(floor):
    from pipeline.kernels.triton_gemm import SHARED_BYTES

    assert floor.narrow_configs(_problem(4096, 4096, tokens=1)) == []
    for fp8 in (False, True):
        found = floor.narrow_configs(_problem(4096, 4096, fp8=fp8))
        assert found and {c.block_c for c in found} == {16, 32}
        for c in found:
            assert c.swapped and c.split_k == 1 and 4096 % c.block_k == 0
            assert c.block_k * (1 if fp8 else 2) in (256, 512)
            assert c.num_warps * 16 <= 2 * c.block_c  # one to four warps, at least 8 columns each
            assert c.num_stages * (16 + c.block_c) * c.block_k * (1 if fp8 else 2) <= SHARED_BYTES
    assert {c.block_k for c in floor.narrow_configs(_problem(4096, 4352, fp8=True))} == {256}  # 512 does not divide


def test_the_narrow_record_wins_nowhere_by_benchs_margin_and_loses_most_on_fp8():
    record = json.loads((ROOT / "bench" / "results" / "decode_floor_narrow_h100_2026-11-27.json").read_text())
    assert len(record["rows"]) == 12 and record["args"]["families"] == ["swapped", "narrow"]
    for row in record["rows"]:
        product, narrow = _best(row["fraction"], "triton_"), _best(row["fraction"], "narrow:")
        assert narrow < 1.02 * product  # never past the margin a winner must clear
        if row["dtype"] == "fp8":
            assert narrow < 0.95 * product
        assert max(row["relative_error"].values()) < 2e-2


def test_the_rows_literal_record_trails_the_swapped_tile_everywhere_and_most_at_eight_tokens():
    record = json.loads((ROOT / "bench" / "results" / "decode_floor_rowslit_h100_2026-11-27.json").read_text())
    assert len(record["rows"]) == 12
    for row in record["rows"]:
        product, literal = _best(row["fraction"], "triton_"), _best(row["fraction"], "rowslit:")
        assert literal < 0.9 * product
        if row["tokens"] == 8:
            assert literal < 0.6 * product
        assert max(row["relative_error"].values()) < 2e-2


def test_wholek_configs_cover_the_row_in_one_k_tile_at_one_token(floor):
    assert floor.wholek_configs(_problem(37888, 3584)) == []  # four tokens
    found = floor.wholek_configs(_problem(37888, 3584, tokens=1))
    assert found and {c.block_k for c in found} == {4096}
    for c in found:
        assert c.family == "gemv" and c.split_k == 1 and 4 <= c.block_c * c.block_k / (32 * c.num_warps) <= 32
    assert {c.block_k for c in floor.wholek_configs(_problem(4096, 4096, tokens=1))} == {4096}
    assert floor.wholek_configs(_problem(4096, 14336, tokens=1)) == []  # a 16384 tile is past the probe's bound


def test_with_early_scales_moves_each_kernels_scale_loads_ahead_of_its_k_loop(floor):
    source = (ROOT / "pipeline" / "kernels" / "triton_kernels.py").read_text()
    changed = floor.with_early_scales(source)
    for kernel in ("gemm", "swapped", "gemv"):
        text = next(p for p in changed.split("@triton.jit\n") if p.startswith(f"def {kernel}("))
        load = text.index("scale = tl.load(scale_x) * tl.load(scale_y)")
        assert load < text.index("for k in range(k0, k_end, BK):") < text.index("*= scale\n")
        assert "tl.load(scale_x)" not in text[load + 10 :]
    with pytest.raises(ValueError, match="with_early_scales needs updating"):
        floor.with_early_scales(source.replace("for k in range(k0, k_end, BK):", "for k in range(0, K, BK):"))


def _best(fraction: dict, prefix: str) -> float:
    return max(v for n, v in fraction.items() if n.startswith(prefix))


def test_the_longk_and_wholek_records_lose_to_the_products_space_on_every_gemm():
    for name, prefix, rows in (("longk", "longk:", 20), ("wholek_t1", "wholek:", 9)):
        record = json.loads((ROOT / "bench" / "results" / f"decode_floor_{name}_h100_2026-11-27.json").read_text())
        assert len(record["rows"]) == rows
        for row in record["rows"]:
            assert _best(row["fraction"], "triton_") > _best(row["fraction"], prefix)
            assert max(row["relative_error"].values()) < 2e-2


def test_the_early_scales_record_pairs_each_finalist_and_gains_nothing_at_one_token():
    record = json.loads((ROOT / "bench" / "results" / "decode_floor_early_scales_h100_2026-11-27.json").read_text())
    rows = [row for part in record["parts"] for row in part["rows"]]
    assert len(rows) == 12 and all(row["dtype"] == "fp8" for row in rows)
    for row in rows:
        fraction = row["fraction"]
        pairs = [(v, fraction["early:" + n[5:]]) for n, v in fraction.items() if n.startswith("late:")]
        assert len(pairs) == 3
        if row["tokens"] == 1:
            assert all(early < late for late, early in pairs)
        assert max(e for _, e in pairs) < 1.01 * max(v for v, _ in pairs)
        assert max(row["relative_error"].values()) < 2e-2


def test_literal_configs_are_one_token_tiles_no_longer_than_ks_next_power_of_two(floor):
    assert floor.literal_configs(_problem(37888, 3584)) == []  # four tokens
    found = floor.literal_configs(_problem(37888, 3584, tokens=1))
    assert {c.block_c for c in found} == {1} and {c.block_k for c in found} == {512, 2048, 4096}
    for c in found:
        assert c.split_k == 1 and c.num_stages == 1 and 2 <= c.block_c * c.block_k // (32 * c.num_warps) <= 32
    assert {c.block_k for c in floor.literal_configs(_problem(4096, 2048, tokens=1))} == {512, 2048}


def test_with_literal_sizes_makes_gemm_take_its_sizes_as_constants_as_swapped_does(floor):
    source = (ROOT / "pipeline" / "kernels" / "triton_kernels.py").read_text()
    changed = floor.with_literal_sizes(source)
    for kernel, literal in (("gemm", True), ("swapped", True), ("gemv", False), ("gemv_literal", True)):
        text = next(p for p in changed.split("@triton.jit\n") if p.startswith(f"def {kernel}("))
        signature = text[: text.index("):")]
        for name in ("R", "C", "K", "K_PER", "sxb", "sxr", "sxk", "syb", "syk", "syc", "sob", "sor", "soc"):
            assert bool(re.search(rf"\b{name}: tl.constexpr", signature)) == literal, (kernel, name)
    assert changed.count("\n") == source.count("\n"), "signatures rewritten in place, bodies untouched"
    with pytest.raises(ValueError, match="with_literal_sizes needs updating"):
        floor.with_literal_sizes(source.replace("sxb, sxr, sxk,", "sxb, sxr,"))


def test_a_paired_variant_times_the_best_three_configs_of_the_kernels_it_rewrites(floor):
    """Another kernel's config would run the same code in both arms: the swapped tile has literal sizes already."""
    from pipeline.kernels.triton_gemm import TritonConfig

    swapped = [TritonConfig(16, c, bk, 1, 1, 4, s, swapped=True).name for c, bk, s in ((64, 128, 6), (64, 256, 4))]
    skinny = [TritonConfig(16, c, 128, split, 8, 4, 4).name for c, split in ((32, 1), (32, 2), (64, 1), (64, 2))]
    ranked = ["default", *swapped, skinny[0], "wider:" + skinny[1], *skinny[1:]]
    assert floor.best_three(ranked, {"gemm"}) == skinny[:3]
    assert floor.best_three(ranked, {"gemm", "swapped"}) == [*swapped, skinny[0]]
    assert floor.best_three(ranked, {"gemv"}) == []
    kernels = {"gemv": TritonConfig(1, 4, 512), "gemv_literal": TritonConfig(1, 1, 4096, 1, 1, 8, 1, literal=True)}
    kernels |= {"gemm": TritonConfig(64, 128, 64), "swapped": TritonConfig(16, 64, 128, swapped=True)}
    assert {name: c.kernel for name, c in kernels.items()} == {name: name for name in kernels}
    assert TritonConfig(16, 64, 128).kernel == "gemm", "the skinny tile is gemm's"


def test_the_literal_record_at_one_token_beats_the_product_and_max_autotune_where_its_twin_loses():
    record = json.loads((ROOT / "bench" / "results" / "decode_floor_literal_t1_h100_2026-11-27.json").read_text())
    assert len(record["rows"]) == 9 and all(row["tokens"] == 1 for row in record["rows"])
    for row in record["rows"]:
        fraction = row["fraction"]
        literal, sized, product = (_best(fraction, p) for p in ("literal:", "sized:", "triton_"))
        assert literal > product > sized and literal > fraction["inductor"] > 0
        assert "inductor" not in row["relative_error"] and max(row["relative_error"].values()) < 2e-2


def test_the_literal_sizes_record_on_the_swapped_tile_pairs_each_finalist():
    record = json.loads((ROOT / "bench" / "results" / "decode_floor_literal_t48_h100_2026-11-27.json").read_text())
    assert len(record["rows"]) == 20 and {row["tokens"] for row in record["rows"]} == {4, 8}
    for row in record["rows"]:
        fraction = row["fraction"]
        pairs = [(v, fraction["literal:" + n[6:]]) for n, v in fraction.items() if n.startswith("sized:")]
        assert len(pairs) == 3
        if row["dtype"] == "fp8":
            assert all(literal > sized for sized, literal in pairs)
        assert max(row["relative_error"].values()) < 2e-2
