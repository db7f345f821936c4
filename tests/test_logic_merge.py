"""merge-logic: every upstream merge.py (S24) rule, and the faster policy's guarantees."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.cli import main
from pipeline.formats.logic import LogicFormatError
from pipeline.stages.merge.logic_merge import MergeOptions, ProblemTypeMismatch, merge_dirs

from .logic_factory import PROBLEM_TYPE, logic, read, solution, write

NAME = "aquavanjaram_Cijk_Alik_Bljk_BBS_BH.yaml"
UP = MergeOptions(policy="upstream")


def _merge(tmp_path, base, new, options=UP, name=NAME, new_name=None):
    write(tmp_path / "base", name, base)
    write(tmp_path / "new", new_name or name, new)
    report = merge_dirs(tmp_path / "base", tmp_path / "new", tmp_path / "out", options)
    return report, tmp_path / "out"


# --- upstream ------------------------------------------------------------------------------------------


def test_forced_by_default_new_wins_even_when_slower(tmp_path):
    base = logic([[[64, 64, 1, 64], [0, 500.0]]], [solution(128)])
    new = logic([[[64, 64, 1, 64], [0, 100.0]]], [solution(256)])
    report, out = _merge(tmp_path, base, new)
    merged = read(out / NAME)
    assert merged[7] == [[[64, 64, 1, 64], [0, 100.0]]] and merged[5][0]["MacroTile0"] == 256
    assert any(line.startswith("[!] [64, 64, 1, 64] already exists and does not improve") for line in report.lines)
    assert "Merge policy: Forced" in report.lines[0]


def test_path_rule_turns_forcing_off_and_the_first_file_decides(tmp_path):
    base = logic([[[64, 64, 1, 64], [0, 500.0]]], [solution(128)])
    new = logic([[[64, 64, 1, 64], [0, 100.0]]], [solution(256)])
    _, out = _merge(tmp_path / "a", base, new, name="arcturus_X.yaml")
    assert read(out / "arcturus_X.yaml")[5][0]["MacroTile0"] == 128  # winner by efficiency: base kept
    # both names in one run: "aquavanjaram_..." sorts first and its forced policy sticks for arcturus_X.yaml
    write(tmp_path / "b" / "base", "arcturus_X.yaml", base)
    write(tmp_path / "b" / "new", "arcturus_X.yaml", new)
    _report, out = _merge(tmp_path / "b", base, new, name="aquavanjaram_X.yaml")
    assert read(out / "arcturus_X.yaml")[5][0]["MacroTile0"] == 256
    _, out = _merge(tmp_path / "c", base, new, options=MergeOptions(policy="upstream", force_merge="FALSE"))
    assert read(out / NAME)[5][0]["MacroTile0"] == 128
    _, out = _merge(tmp_path / "d", base, new, options=MergeOptions(policy="upstream", force_merge="yes"))
    assert read(out / NAME)[5][0]["MacroTile0"] == 256, "any other string is truthy upstream"


def test_files_matched_by_basename_yaml_only_new_only_ignored(tmp_path):
    base = logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)])
    write(tmp_path / "base", "A.YAML", base)
    write(tmp_path / "base", "B.yaml", base)
    write(tmp_path / "base", "C.yml", base)
    new = logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(256)])
    for name in ("A.YAML", "C.yml", "D.yaml"):
        write(tmp_path / "new", name, new)
    write(tmp_path / "new" / "sub", "B.yaml", new)
    report = merge_dirs(tmp_path / "base", tmp_path / "new", tmp_path / "out", UP)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["A.YAML"]
    assert any("Ignored" in line and "D.yaml" in line for line in report.lines)


def test_trim_keeps_the_first_colliding_row_regardless_of_efficiency(tmp_path):
    base = logic(
        [
            [[64, 64, 1, 64, 64, 64, 64, 64], [0, 10.0]],
            [[64, 64, 1, 64, 64, 64, 128, 128], [1, 50.0]],
            [[96, 96, 1, 96, 96, 96, 96, 96], [0, 1.0]],
            [[96, 96, 1, 96], [1, 2.0]],
        ],
        [solution(128, 0), solution(256, 1)],
    )
    new = logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(128)])
    report, out = _merge(tmp_path, base, new)
    rows = read(out / NAME)[7]
    # [64..] first row wins over the faster second; the 8-value [96..] row dies because a short [96..] exists
    assert rows == [[[64, 64, 1, 64], [0, 10.0]], [[96, 96, 1, 96], [1, 2.0]], [[32, 32, 1, 32], [0, 9.0]]]
    assert "2 duplicate size(s) removed from base logic file" in report.lines
    _, out = _merge(tmp_path / "notrim", base, new, options=MergeOptions(policy="upstream", trim=False))
    assert len(read(out / NAME)[7]) == 5 and read(out / NAME)[7][0][0] == [64, 64, 1, 64, 64, 64, 64, 64]


def test_a_size_repeated_in_new_is_appended_twice(tmp_path):
    base = logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)])
    new = logic([[[32, 32, 1, 32], [0, 9.0]], [[32, 32, 1, 32], [1, 7.0]]], [solution(256, 0), solution(512, 1)])
    _, out = _merge(tmp_path, base, new)
    assert [row[0] for row in read(out / NAME)[7]] == [[64, 64, 1, 64], [32, 32, 1, 32], [32, 32, 1, 32]]


def test_kernel_dedupe_ignores_index_and_name_only(tmp_path):
    base = logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)])
    same = solution(128)
    same["SolutionNameMin"], same["SolutionIndex"] = "renamed", 7
    other = solution(128)
    other["KernelNameMin"] = "other-kernel"
    new = logic([[[32, 32, 1, 32], [0, 9.0]], [[16, 16, 1, 16], [1, 9.0]]], [same, other])
    _, out = _merge(tmp_path, base, new)
    merged = read(out / NAME)
    assert len(merged[5]) == 2 and [row[1][0] for row in merged[7]] == [0, 0, 1]
    assert merged[5][1]["KernelNameMin"] == "other-kernel"


def test_unused_kernels_dropped_and_renumbered_in_pool_order(tmp_path):
    base = logic(
        [[[64, 64, 1, 64], [2, 5.0]], [[16, 16, 1, 16], [0, 5.0]]],
        [solution(64, 0), solution(128, 1), solution(256, 2)],
    )
    new = logic([[[64, 64, 1, 64], [0, 9.0]]], [solution(512)])
    report, out = _merge(tmp_path, base, new)
    merged = read(out / NAME)
    assert [s["MacroTile0"] for s in merged[5]] == [64, 512] and [s["SolutionIndex"] for s in merged[5]] == [0, 1]
    assert merged[7] == [[[64, 64, 1, 64], [1, 9.0]], [[16, 16, 1, 16], [0, 5.0]]]
    assert report.lines[-1] == "0 size(s) and 1 kernel(s) added, 2 kernel(s) removed"


def test_problem_type_mismatch_is_bad_input_naming_the_key_as_upstream_words_it(tmp_path, capsys):
    base = logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)])
    other = {**PROBLEM_TYPE, "DataType": 4}
    new = logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(256, problem_type=other)], problem_type=other)
    write(tmp_path / "base", NAME, base)
    write(tmp_path / "new", NAME, new)
    with pytest.raises(ProblemTypeMismatch):
        merge_dirs(tmp_path / "base", tmp_path / "new", tmp_path / "out", UP)
    code = main(
        ["merge-logic", str(tmp_path / "base"), str(tmp_path / "new"), str(tmp_path / "out"), "--policy", "upstream"]
    )
    assert code == 12, "bad input (upstream merge.py exits 1, which gemm-tune keeps for bugs)"
    err = capsys.readouterr().err
    assert err.startswith("gemm-tune merge-logic: ProblemTypeMismatch (exit 12, bad input): [Error] ProblemType")
    assert "DataType: 7 != 4" in err.splitlines()[0]
    assert not (tmp_path / "out").exists()
    sol_only = logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(256, problem_type=other)])  # header alike
    write(tmp_path / "new2", NAME, sol_only)
    with pytest.raises(ProblemTypeMismatch, match=r"doesn't match solution\(idx=0\): \n\tDataType: 7 != 4"):
        merge_dirs(tmp_path / "base", tmp_path / "new2", tmp_path / "out", UP)


def test_waived_keys_leave_the_base_and_stagger_is_sanitized(tmp_path):
    base_pt = {**PROBLEM_TYPE, "Legacy": 1}
    base = logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128, stagger=0, problem_type=base_pt)], problem_type=base_pt)
    new = logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(256)])
    _, out = _merge(tmp_path, base, new)
    merged = read(out / NAME)
    assert "Legacy" not in merged[4] and "Legacy" not in merged[5][0]["ProblemType"]
    assert (merged[5][0]["StaggerUMapping"], merged[5][0]["StaggerUStride"], merged[5][0]["_staggerStrideShift"]) == (
        0,
        0,
        0,
    )


def test_no_eff_and_output_is_upstream_yaml(tmp_path):
    base = logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)])
    new = logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(256)])
    _, out = _merge(tmp_path, base, new, options=MergeOptions(policy="upstream", no_eff=True))
    text = (out / NAME).read_text()
    merged = yaml.safe_load(text)
    assert merged[7] == [[[64, 64, 1, 64], [0, 5.0]], [[32, 32, 1, 32], [1, 0.0]]]
    assert text == yaml.safe_dump(merged, default_flow_style=None)  # sorted keys, flow leaves, no markers
    assert text.index("GlobalSplitU") < text.index("KernelNameMin") < text.index("SolutionIndex")


def test_upstream_refuses_what_s24_cannot_read(tmp_path):
    base = logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)])
    with pytest.raises(LogicFormatError, match="crashes on it"):
        _merge(tmp_path / "a", base, logic(None, [solution(256)], library_type="FreeSize"))
    mapping = dict(
        zip(
            [
                "MinimumRequiredVersion",
                "ScheduleName",
                "ArchitectureName",
                "DeviceNames",
                "ProblemType",
                "Solutions",
                "IndexOrder",
                "ExactLogic",
                "RangeLogic",
                "TileSelection",
                "PerfMetric",
                "LibraryType",
            ],
            logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(256)]),
            strict=True,
        )
    )
    with pytest.raises(LogicFormatError, match="list-format logic only"):
        _merge(tmp_path / "b", base, mapping)


# --- faster --------------------------------------------------------------------------------------------

FAST = MergeOptions()


def test_faster_keeps_the_faster_entry_by_margin_and_reports(tmp_path):
    base = logic(
        [[[64, 64, 1, 64], [0, 500.0]], [[32, 32, 1, 32], [0, 500.0]], [[16, 16, 1, 16], [0, 0.0]]], [solution(128)]
    )
    new = logic(
        [
            [[64, 64, 1, 64], [0, 520.0]],
            [[32, 32, 1, 32], [0, 505.0]],
            [[16, 16, 1, 16], [0, 90.0]],
            [[8, 8, 1, 8], [0, 1.0]],
            [[8, 8, 1, 8], [1, 3.0]],
        ],
        [solution(256, 0), solution(512, 1)],
    )
    report, out = _merge(tmp_path, base, new, options=FAST)
    merged = read(out / NAME)
    by_size = {tuple(k): (merged[5][i]["MacroTile0"], eff) for k, (i, eff) in merged[7]}
    assert by_size == {
        (64, 64, 1, 64): (256, 520.0),
        (32, 32, 1, 32): (128, 500.0),
        (16, 16, 1, 16): (256, 90.0),  # no base efficiency (upstream's 0.0): replaced pending Validate
        (8, 8, 1, 8): (512, 3.0),
    }
    text = "\n".join(report.lines)
    assert "replaced [64, 64, 1, 64]: efficiency 500.0 -> 520.0 (1.040x faster)" in text
    assert "kept base [32, 32, 1, 32]: efficiency 500.0 vs 505.0 is within the 2% margin or slower" in text
    assert "replaced [16, 16, 1, 16] pending Validate: no efficiency to compare" in text
    (pending,) = report.pending
    assert pending["size"] == [16, 16, 1, 16] and pending["base"][0]["MacroTile0"] == 128 and pending["base"][1] == 0.0
    assert json.loads((out.with_name(out.name + "-pending.json")).read_text()) == report.pending
    assert "[8, 8, 1, 8] appears twice" in text and "added [8, 8, 1, 8]" in text
    _, out = _merge(tmp_path / "forced", base, new, options=MergeOptions(force_merge="true"))
    assert {tuple(k): eff for k, (_, eff) in read(out / NAME)[7]}[(16, 16, 1, 16)] == 90.0


def test_faster_trims_ld_keys_unless_asked_and_copies_one_sided_files(tmp_path):
    base = logic([[[64, 64, 1, 64, 64, 64, 64, 64], [0, 10.0]]], [solution(128)])
    new = logic([[[64, 64, 1, 64, 64, 64, 128, 128], [0, 50.0]]], [solution(256)])
    write(tmp_path / "base", "only_base.yaml", base)
    only_new = write(tmp_path / "new", "only_new.yaml", new)
    _, out = _merge(tmp_path, base, new, options=FAST)
    assert read(out / NAME)[7] == [[[64, 64, 1, 64], [0, 50.0]]]
    assert (out / "only_base.yaml").read_bytes() == (tmp_path / "base" / "only_base.yaml").read_bytes()
    assert (out / "only_new.yaml").read_bytes() == only_new.read_bytes()
    _, out = _merge(tmp_path / "keep", base, new, options=MergeOptions(trim=False))
    assert [row[0][4:] for row in read(out / NAME)[7]] == [[64, 64, 64, 64], [64, 64, 128, 128]]


def test_faster_refuses_other_problem_types_and_library_types(tmp_path):
    base = logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)])
    other = {**PROBLEM_TYPE, "TransposeA": False}
    with pytest.raises(ProblemTypeMismatch, match=r"TransposeA \(True != False\)"):
        _merge(tmp_path / "a", base, logic([[[1, 1, 1, 1], [0, 1.0]]], [solution(8)], problem_type=other), options=FAST)
    with pytest.raises(LogicFormatError, match="GridBased logic cannot merge into Equality"):
        _merge(
            tmp_path / "b",
            base,
            logic([[[1, 1, 1, 1], [0, 1.0]]], [solution(8)], library_type="GridBased"),
            options=FAST,
        )


SIZES = st.tuples(st.sampled_from([16, 32, 64]), st.sampled_from([8, 128]), st.just(1), st.sampled_from([64, 4096]))
ROWS = st.lists(
    st.tuples(SIZES, st.integers(0, 2), st.floats(1, 1000)), min_size=1, max_size=8, unique_by=lambda r: r[0]
)


def _clean(rows):
    """A base file whose rows use every solution, with indices equal to positions."""
    used = sorted({index for _, index, _ in rows})
    remap = {old: new for new, old in enumerate(used)}
    return logic(
        [[list(size), [remap[i], eff]] for size, i, eff in rows], [solution(32 * (i + 1), remap[i]) for i in used]
    )


@settings(max_examples=40, deadline=None)
@given(ROWS, ROWS, st.sampled_from([0.0, 0.02, 0.1]))
def test_faster_loses_no_entry_unless_a_faster_one_replaces_it(tmp_path_factory, base_rows, new_rows, margin):
    tmp = tmp_path_factory.mktemp("prop")
    base, new = _clean(base_rows), _clean(new_rows)
    _, out = _merge(tmp, base, new, options=MergeOptions(margin=margin))
    merged = {tuple(k): eff for k, (_, eff) in read(out / NAME)[7]}
    base_eff = {tuple(s): e for s, _, e in base_rows}
    new_eff = {tuple(s): e for s, _, e in new_rows}
    assert set(merged) == set(base_eff) | set(new_eff)
    for key, eff in merged.items():
        if key in base_eff and eff != base_eff[key]:
            assert eff == new_eff[key] and eff > base_eff[key] * (1 + margin)
        if key in base_eff and key in new_eff and new_eff[key] > base_eff[key] * (1 + margin):
            assert eff == new_eff[key]


@settings(max_examples=30, deadline=None)
@given(ROWS)
def test_merging_a_file_into_itself_changes_nothing_and_is_deterministic(tmp_path_factory, rows):
    tmp = tmp_path_factory.mktemp("self")
    base = _clean(rows)
    _, out = _merge(tmp, base, copy.deepcopy(base), options=FAST)
    assert read(out / NAME) == base
    first = (out / NAME).read_bytes()
    merge_dirs(tmp / "base", tmp / "new", tmp / "again", FAST)
    assert (tmp / "again" / NAME).read_bytes() == first


def test_cli_merge_logic_faster(tmp_path, capsys):
    write(tmp_path / "base", NAME, logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)]))
    write(tmp_path / "new", NAME, logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(256)]))
    assert main(["merge-logic", str(tmp_path / "base"), str(tmp_path / "new"), str(tmp_path / "out")]) == 0
    assert "added [32, 32, 1, 32] (efficiency 9.0)" in capsys.readouterr().out
    (tmp_path / "new" / "bad.yaml").write_text("- [")
    (tmp_path / "base" / "bad.yaml").write_text("- [")
    assert main(["merge-logic", str(tmp_path / "base"), str(tmp_path / "new"), str(tmp_path / "out2")]) == 12
    assert f"{tmp_path / 'base' / 'bad.yaml'}: not YAML" in capsys.readouterr().err


def test_winner_records_merged_into_upstream_logic_land_beside_the_tree_not_in_it(tmp_path):
    """``--backend hipblaslt`` records merged into a base of real logic: the merged tree holds the logic alone (what
    TensileCreateLibrary reads has a KernelLanguage in every solution), the records go beside it, and the CLI
    says where."""
    from pipeline.formats.logic import dump_logic, is_record, load_logic, record_equality

    base = write(tmp_path / "base", NAME, logic([[[512, 512, 1, 512], [0, 0.0]]], [solution(128)]))
    record = record_equality("hipblaslt", PROBLEM_TYPE, "gfx942", ["Device 0049"], [((512, 8, 1, 512), {"x": 1}, 9.0)])
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / f"hipblaslt_{NAME}").write_text(dump_logic(record))
    report = merge_dirs(tmp_path / "base", tmp_path / "new", tmp_path / "out", MergeOptions())
    assert report.written == [NAME] and report.records == [f"hipblaslt_{NAME}"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.yaml")) == [NAME]
    assert not is_record(load_logic(tmp_path / "out" / NAME)) and read(tmp_path / "out" / NAME) == read(base)
    assert is_record(load_logic(tmp_path / "out-records" / f"hipblaslt_{NAME}"))
    assert main(["merge-logic", str(tmp_path / "base"), str(tmp_path / "new"), str(tmp_path / "cli")]) == 0
    assert sorted(p.name for p in (tmp_path / "cli-records").glob("*.yaml")) == [f"hipblaslt_{NAME}"]
    assert sorted(p.name for p in (tmp_path / "cli").glob("*.yaml")) == [NAME]
    logic_only = merge_dirs(tmp_path / "base", tmp_path / "base", tmp_path / "plain", MergeOptions())
    assert logic_only.records == [] and not (tmp_path / "plain-records").exists(), "no records: no directory"


def test_a_pending_size_ships_where_validate_measured_it_faster_and_goes_back_to_the_base_elsewhere(tmp_path):
    """Upstream logic carries efficiency 0.0: the faster policy replaces such a size pending Validate, and
    ``settle`` (the bundle) keeps the tuned entry where Validate measured it faster than the library's pick, and
    puts the base entry back elsewhere, saying why for each size."""
    from pipeline.formats.logic import load_logic
    from pipeline.stages.merge.logic_merge import settle

    base = logic([[[16, 16, 1, 16], [0, 0.0]], [[32, 32, 1, 32], [0, 0.0]]], [solution(128)])
    new = logic([[[16, 16, 1, 16], [0, 90.0]], [[32, 32, 1, 32], [0, 80.0]]], [solution(256, 0)])
    report, out = _merge(tmp_path, base, new, options=FAST)
    assert [p["size"] for p in report.pending] == [[16, 16, 1, 16], [32, 32, 1, 32]]
    merged = load_logic(out / NAME)

    def measured(size):
        return "kept: Validate measured it x1.070 over the library's pick" if size == (16, 16, 1, 16) else None

    decisions = settle(merged, report.pending, measured)
    assert [(d["size"], d["kept"]) for d in decisions] == [([16, 16, 1, 16], True), ([32, 32, 1, 32], False)]
    assert "back to the base entry" in decisions[1]["why"] and "x1.070" in decisions[0]["why"]
    tiles = {tuple(k): (merged.full_solution(i)["MacroTile0"], eff) for k, (i, eff) in merged.exact_logic}
    assert tiles == {(16, 16, 1, 16): (256, 90.0), (32, 32, 1, 32): (128, 0.0)}
    assert sorted(s["SolutionIndex"] for s in merged.solutions) == [0, 1], "both kernels used, renumbered"


def test_the_bundle_settles_a_merged_file_by_its_problem_type_and_records_why(tmp_path):
    from pipeline.formats.logic import load_logic
    from pipeline.stages.validate.bundle import _settle

    base = logic([[[16, 16, 1, 16], [0, 0.0]], [[32, 32, 1, 32], [0, 0.0]]], [solution(128)])
    new = logic([[[16, 16, 1, 16], [0, 90.0]], [[32, 32, 1, 32], [0, 80.0]]], [solution(256, 0)])
    report, out = _merge(tmp_path, base, new, options=FAST)
    problem_type = NAME.removesuffix(".yaml").removeprefix("aquavanjaram_")
    (tmp_path / "bundle").mkdir()
    decisions = _settle(
        load_logic(out / NAME), out / NAME, report.pending, {(problem_type, (32, 32, 1, 32)): 1.05}, tmp_path / "bundle"
    )
    assert [(d["file"], d["size"], d["kept"]) for d in decisions] == [
        (NAME, [16, 16, 1, 16], False),
        (NAME, [32, 32, 1, 32], True),
    ]
    shipped = {tuple(k): eff for k, (_, eff) in read(tmp_path / "bundle" / NAME)[7]}
    assert shipped == {(16, 16, 1, 16): 0.0, (32, 32, 1, 32): 80.0}


def test_force_merge_false_keeps_a_base_entry_without_efficiency(tmp_path):
    base = logic([[[16, 16, 1, 16], [0, 0.0]]], [solution(128)])
    new = logic([[[16, 16, 1, 16], [0, 90.0]]], [solution(256, 0)])
    report, out = _merge(tmp_path, base, new, options=MergeOptions(force_merge="false"))
    assert report.pending == [] and read(out / NAME)[5][0]["MacroTile0"] == 128
    assert any("kept base [16, 16, 1, 16]: no efficiency to compare" in line for line in report.lines)
