"""Nothing lost, nothing silent (#34): what ``gemm-tune`` writes never replaces what it did not write, every file
that goes into a merged set is parsed, a cut TunableOp line is not read as a GEMM, and bad input is one line
with exit 12 naming the file."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from pipeline.atomic import OUTPUT_MARKER
from pipeline.cli import main
from pipeline.formats.tunableop import TunableOpFormatError, parse_text, read_file

from .helpers import FIXTURES
from .logic_factory import PROBLEM_TYPE, logic, solution, write

SHAPES = FIXTURES / "configs" / "shapes.json"
NAME = "aquavanjaram_Cijk_Alik_Bljk_BBS_BH.yaml"


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its sha256: what must come out of a refused command unchanged."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def logic_dirs(tmp_path: Path) -> Path:
    """``a/w/base``, ``a/w/new`` (logic to merge) and an unrelated ``a/keep.txt``, as a user's tree."""
    work = tmp_path / "a" / "w"
    write(work / "base", NAME, logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)]))
    write(work / "new", NAME, logic([[[32, 32, 1, 32], [0, 9.0]]], [solution(256)]))
    (tmp_path / "a" / "keep.txt").write_text("mine\n")
    return work


@pytest.mark.parametrize("out", [".", "..", "base", "new"])
def test_merge_logic_refuses_an_output_that_holds_an_input_or_the_cwd(logic_dirs, monkeypatch, capsys, out):
    monkeypatch.chdir(logic_dirs)
    before = _tree(logic_dirs.parent)
    assert main(["merge-logic", "base", "new", out, "--force"]) == 12, "--force never replaces the inputs"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gemm-tune merge-logic: BadInput (exit 12, bad input): {out}: holds")
    assert _tree(logic_dirs.parent) == before
    assert not list(logic_dirs.parent.parent.rglob("*.partial")), "no staging directory left behind"


def test_an_existing_file_is_not_turned_into_a_directory(logic_dirs, monkeypatch, capsys):
    monkeypatch.chdir(logic_dirs)
    victim = logic_dirs / "victim.txt"
    victim.write_text("keep me\n")
    assert main(["configs", str(SHAPES), "--out", "victim.txt"]) == 12
    assert main(["merge-logic", "base", "new", "victim.txt"]) == 12
    assert victim.read_text() == "keep me\n" and not list(logic_dirs.glob("victim.txt.*"))
    assert capsys.readouterr().err.count("exists and is not a directory") == 2


def test_a_directory_gemm_tune_did_not_write_needs_force(logic_dirs, monkeypatch, capsys):
    monkeypatch.chdir(logic_dirs)
    theirs = logic_dirs / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine\n")
    assert main(["configs", str(SHAPES), "--out", "theirs"]) == 12
    assert "did not write" in capsys.readouterr().err and (theirs / "notes.txt").exists()
    assert main(["configs", str(SHAPES), "--out", "ours"]) == 0
    assert (logic_dirs / "ours" / OUTPUT_MARKER).exists() and (logic_dirs / "ours" / "configs.json").exists()
    assert main(["configs", str(SHAPES), "--out", "ours"]) == 0, "its own output is replaced as before"
    assert main(["configs", str(SHAPES), "--out", "theirs", "--force"]) == 0
    assert not (theirs / "notes.txt").exists() and (theirs / "configs.json").exists()
    assert main(["merge-logic", "base", "new", "merged"]) == 0 and main(["merge-logic", "base", "new", "merged"]) == 0
    assert sorted(p.name for p in (logic_dirs / "merged").iterdir()) == [OUTPUT_MARKER, NAME]


@pytest.mark.parametrize(
    "content",
    [b"", b"- {MinimumRequiredVersion: 4.33.0}\n- aquavanj", b"\x00\xff garbage [", b"x: [" + b"1, " * 400_000],
    ids=["empty", "truncated", "garbage", "1 MB"],
)
def test_merge_logic_parses_every_file_it_copies(logic_dirs, capsys, content):
    (logic_dirs / "new" / "only_new.yaml").write_bytes(content)
    out = logic_dirs / "out"
    assert main(["merge-logic", str(logic_dirs / "base"), str(logic_dirs / "new"), str(out)]) == 12
    assert f"{logic_dirs / 'new' / 'only_new.yaml'}:" in capsys.readouterr().err
    assert not out.exists()


def test_merge_logic_parses_base_files_it_copies_unchanged(logic_dirs, capsys):
    (logic_dirs / "base" / "only_base.yaml").write_text("")
    assert main(["merge-logic", str(logic_dirs / "base"), str(logic_dirs / "new"), str(logic_dirs / "out")]) == 12
    assert "only_base.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["upstream", "faster"])
def test_a_problem_type_mismatch_is_bad_input_naming_the_key_that_differs(logic_dirs, capsys, policy):
    other = {**PROBLEM_TYPE, "TransposeA": False}
    write(
        logic_dirs / "new",
        NAME,
        logic([[[1, 1, 1, 1], [0, 1.0]]], [solution(8, problem_type=other)], problem_type=other),
    )
    assert (
        main(
            [
                "merge-logic",
                str(logic_dirs / "base"),
                str(logic_dirs / "new"),
                str(logic_dirs / "out"),
                "--policy",
                policy,
            ]
        )
        == 12
    )
    first = capsys.readouterr().err.splitlines()[0]
    assert "ProblemTypeMismatch (exit 12, bad input)" in first and "TransposeA" in first and "Batched" not in first


def test_a_cut_last_line_is_not_read_as_a_gemm(tmp_path, capsys):
    cut = tmp_path / "cut.csv"
    cut.write_text("GemmTunableOp_Half_TN,tn_4096_64_4096_ld_4096_4096_4096\nGemmTunableOp_Half_TN,tn_4096_64_11")
    with pytest.raises(TunableOpFormatError, match=r"cut\.csv:2: truncated line"):
        read_file(cut)
    assert main(["shapes", str(cut)]) == 12
    assert f"{cut}:2: truncated line" in capsys.readouterr().err
    assert main(["shapes", str(cut), "--lenient", "--json", str(tmp_path / "s.json")]) == 0
    said = capsys.readouterr().out
    assert "1 malformed lines skipped" in said and "truncated line" in said
    assert [row["k"] for row in json.loads((tmp_path / "s.json").read_text())] == [4096]
    unparsable = parse_text(
        "GemmTunableOp_Half_TN,tn_8_8_8_ld_8_8_8\nGemmTunableOp_Half_TN,tn_8_8_8_ld_8", lenient=True
    )
    assert [s.reason.split(" (")[0] for s in unparsable.skipped] == ["truncated line"]
    results = "Validator,PT_VERSION,2.11.0\nGemmTunableOp_Half_TN,tn_8_8_8_ld_8_8_8,Default,0.01\n"
    assert len(parse_text(results + "GemmTunableOp_Half_TN,tn_8_8_8_ld_8_8_8,Default", lenient=True).skipped) == 1


def test_a_last_line_without_newline_that_is_whole_is_kept(tmp_path):
    whole = "GemmTunableOp_Half_TN,tn_8_8_8_ld_8_8_8\nGemmTunableOp_Half_TN,tn_16_8_8_ld_16_8_16"
    assert [e.problem.m for e in parse_text(whole).entries] == [8, 16]
    assert [e.problem.k for e in parse_text("GemmTunableOp_Half_TN,tn_8_8_11").entries] == [11], "nothing to compare"
    (tmp_path / "w.csv").write_text(whole)
    assert len(read_file(tmp_path / "w.csv").entries) == 2


def test_gather_shapes_refuses_a_cut_line_too(tmp_path):
    from pipeline.stages.gather.shapes import gather

    cut = tmp_path / "cut.csv"
    cut.write_text("GemmTunableOp_Half_TN,tn_4096_64_4096_ld_4096_4096_4096\nGemmTunableOp_Half_TN,tn_4096_64_11")
    with pytest.raises(TunableOpFormatError, match="truncated line"):
        gather([str(cut)])


@pytest.mark.parametrize(
    "text,where",
    [
        ("", "the file is empty"),
        ('[{"op": "gemm", ', ":1:"),
        ("GemmTunableOp_Half_TN,tn_8_8_8\n", ":1:1: not shapes JSON"),
    ],
)
def test_configs_on_a_bad_shapes_file_is_one_line(tmp_path, capsys, text, where):
    bad = tmp_path / "shapes.json"
    bad.write_text(text)
    assert main(["configs", str(bad), "--out", str(tmp_path / "out")]) == 12
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gemm-tune configs: BadInput (exit 12, bad input):") and where in err[0]
    assert str(bad) in err[0]


def test_bad_options_and_json_inputs_are_one_line(tmp_path, capsys):
    assert main(["configs", str(SHAPES), "--out", str(tmp_path / "o"), "--tensile-preset", "nosuch"]) == 12
    assert "--tensile-preset 'nosuch'" in capsys.readouterr().err
    untuned = str(FIXTURES / "tunableop" / "torch2.11_cuda_untuned0.csv")
    bad = tmp_path / "calls.json"
    bad.write_text('{"calls": {')
    for option in ("--calls", "--baseline"):
        assert main(["shapes", untuned, option, str(bad)]) == 12
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{bad}:1:" in err[0]


def test_booleans_and_waits_take_only_their_values(tmp_path, capsys):
    with pytest.raises(SystemExit) as usage:
        main(["merge-logic", "a", "b", "c", "--force-merge", "maybe"])
    assert usage.value.code == 2 and "invalid choice: 'maybe'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["nightly", "--wait", "-5"])
    assert usage.value.code == 2 and "must be a finite number >= 0" in capsys.readouterr().err


def test_a_huge_bad_line_is_quoted_short(tmp_path, capsys):
    big = tmp_path / "big.csv"
    big.write_text("GemmTunableOp_Half_TN,tn_" + "9" * 10_000_000 + "\n")
    for argv in (
        ["shapes", str(big)],
        ["shapes", str(big), "--lenient"],
        ["merge-results", str(tmp_path / "o.csv"), str(big)],
    ):
        main(argv)
        said = capsys.readouterr()
        assert len(said.err) + len(said.out) < 2000, argv


def test_empty_results_and_a_directory_for_a_file_are_named(tmp_path, capsys):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert main(["merge-results", str(tmp_path / "out.csv"), str(empty)]) == 12
    assert f"{empty}: the file is empty" in capsys.readouterr().err
    adir = tmp_path / "adir"
    adir.mkdir()
    assert main(["shapes", str(FIXTURES / "tunableop" / "torch2.11_cuda_untuned0.csv"), "--json", str(adir)]) == 12
    err = capsys.readouterr().err
    assert f"{adir}: is a directory" in err and ".tmp" not in err  # refused before anything is read or written
    assert os.listdir(adir) == []


def test_merged_logic_keeps_the_inputs_byte_identical(logic_dirs, capsys):
    before = _tree(logic_dirs)
    assert main(["merge-logic", str(logic_dirs / "base"), str(logic_dirs / "new"), str(logic_dirs.parent / "o")]) == 0
    assert _tree(logic_dirs) == before
    assert yaml.safe_load((logic_dirs.parent / "o" / NAME).read_text())[7][-1][0] == [32, 32, 1, 32]


def test_a_file_output_is_never_a_directory_or_an_input(tmp_path, monkeypatch):
    from pipeline.atomic import claim_output_file
    from pipeline.errors import BadInput

    source = tmp_path / "in.json"
    source.write_text("{}")
    monkeypatch.chdir(tmp_path)
    for out, why in ((".", "is a directory"), (tmp_path, "is a directory"), ("in.json", "one of the inputs")):
        with pytest.raises(BadInput, match=why):
            claim_output_file(out, [source])
    with pytest.raises(BadInput, match="one of the inputs"):
        claim_output_file(tmp_path / "sub" / ".." / "in.json", ["in.json"])  # the same file by another path
    assert claim_output_file("out.json", [source]) == tmp_path / "out.json"
    assert source.read_text() == "{}" and sorted(p.name for p in tmp_path.iterdir()) == ["in.json"]


@pytest.mark.parametrize("script,args", [
    ("gather_bench.py", ["--out", "."]),
    ("triton_bench_cost.py", ["--out", "."]),
    ("triton_hostcost.py", ["--out", "."]),
    ("decode_hbm.py", ["--out", "."]),
    ("decode_hbm.py", ["--winners-from", "decode.json", "--out", "decode.json"]),
    ("serving.py", ["--out", "."]),
])  # fmt: skip
def test_the_benchmarks_refuse_their_output_before_measuring(tmp_path, monkeypatch, script, args):
    import subprocess
    import sys

    from .helpers import ROOT

    for name in ("decode.json",):
        (tmp_path / name).write_text('{"runs": []}')
    before = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True)
    assert done.returncode == 12, done.stderr
    assert "is a directory" in done.stderr or "one of the inputs" in done.stderr
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    "text,why",
    [
        (None, r"No such file or directory: 'missing\.json'"),
        ('{"rows": [', r"record\.json:1:11: not a decode_hbm\.py record"),
        ("[]", r"record\.json: no list of rows"),
        ('{"rows": [{"model": "llama3-8b", "gemm": "o 4096x4096"}]}', r"record\.json: row 0 has no tokens, winners"),
    ],
)
def test_decode_hbm_refuses_a_winners_record_it_cannot_read_before_measuring(tmp_path, monkeypatch, text, why):
    import re
    import subprocess
    import sys

    from .helpers import ROOT

    name = "missing.json" if text is None else "record.json"
    if text is not None:
        (tmp_path / name).write_text(text)
    before = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = [sys.executable, str(ROOT / "bench" / "decode_hbm.py"), "--winners-from", name, "--out", "out.json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 12 and re.search(why, done.stderr), done.stderr
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("out", [".", "bundle", "bundle/tunableop_results.csv", "bundle/manifest.json"])
def test_the_host_cost_command_refuses_an_output_that_is_a_directory_or_what_it_reads(tmp_path, monkeypatch, out):
    import subprocess
    import sys

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "tunableop_results.csv").write_text("Validator,PT_VERSION,2.11.0\n")
    (bundle / "manifest.json").write_text("{}")
    before = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = [sys.executable, "-m", "pipeline.runtime.hostcost", "--bundle", "bundle", "--out", out]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 12, done.stderr
    assert "is a directory" in done.stderr or "one of the inputs" in done.stderr
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["merge-results", "b.csv", "a.csv", "b.csv", "--validators-from", "a.csv"],  # OUT among the inputs
        ["merge-results", "a.csv", "b.csv", "--validators-from", "a.csv"],  # OUT the target's file
        ["merge-results", "./sub/../b.csv", "b.csv"],  # the same file by another path
        ["shapes", "a.csv", "--json", "a.csv"],  # the JSON over the CSV it read
        ["shapes", "*.csv", "--json", "b.csv"],  # over a file a glob matched
    ],
)
def test_a_command_refuses_an_output_that_is_one_of_its_inputs(tmp_path, monkeypatch, capsys, argv):
    source = FIXTURES / "tunableop" / "torch2.11_cuda_results0.csv"
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_bytes(source.read_bytes())
    (tmp_path / "sub").mkdir()
    before = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 12
    assert "is one of the inputs" in capsys.readouterr().err
    assert _tree(tmp_path) == before


def test_merge_results_takes_a_glob_and_names_what_it_cannot_find(tmp_path, monkeypatch, capsys):
    source = FIXTURES / "tunableop" / "torch2.11_cuda_results0.csv"
    for name in ("r_1.csv", "r_2.csv"):
        (tmp_path / name).write_bytes(source.read_bytes())
    monkeypatch.chdir(tmp_path)
    assert main(["merge-results", "out.csv", "r_*.csv"]) == 0
    assert read_file(tmp_path / "out.csv").entries == read_file(source).entries
    capsys.readouterr()
    for spec, said in (("z_*.csv", "z_*.csv: pattern matches no file"), ("nosuch.csv", "nosuch.csv: no such file")):
        assert main(["merge-results", "other.csv", spec]) == 12
        err = capsys.readouterr().err
        assert said in err and "Errno" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "other.csv").exists()


def test_a_cause_of_several_lines_is_said_in_one(tmp_path, monkeypatch, capsys):
    """A validator mismatch (a list of what differs) and a malformed logic YAML (the parser's position) come as
    one line on stderr, the whole cause in it (#65: they took 7 and 5 lines, the first repeated)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cuda.csv").write_bytes((FIXTURES / "tunableop" / "torch2.11_cuda_results0.csv").read_bytes())
    (tmp_path / "rocm.csv").write_bytes((FIXTURES / "tunableop" / "torch2.11_rocm_results0.csv").read_bytes())
    assert main(["merge-results", "o.csv", "cuda.csv", "rocm.csv"]) == 12
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "HIPBLASLT_VERSION = '1100-a4e0b8f5'" in err
    for name in ("base", "new"):
        (tmp_path / name).mkdir()
    (tmp_path / "base" / "x.yaml").write_text("not: [valid\n")
    assert main(["merge-logic", "base", "new", "out"]) == 12
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "x.yaml: not YAML" in err and "line 2, column 1" in err


def test_a_command_replaces_its_own_output_but_not_a_file_it_did_not_write(tmp_path, capsys):
    """merge-results and shapes --json over an existing file: refused in one line (exit 12, the file untouched)
    unless gemm-tune wrote it and it is unchanged since, or --force is given."""
    import subprocess
    import sys

    from pipeline.atomic import wrote

    from .helpers import UNTUNED

    mine, theirs = tmp_path / "merged.csv", tmp_path / "theirs.csv"
    theirs.write_text("a file someone keeps\n")
    results = FIXTURES / "tunableop" / "torch2.11_rocm_results0.csv"
    run = [sys.executable, "-m", "pipeline"]
    refused = subprocess.run([*run, "merge-results", str(theirs), str(results)], capture_output=True, text=True)
    assert refused.returncode == 12 and theirs.read_text() == "a file someone keeps\n"
    assert "exists and gemm-tune did not write it" in refused.stderr and len(refused.stderr.splitlines()) == 1
    for _ in range(2):  # the second run replaces what the first wrote
        done = subprocess.run([*run, "merge-results", str(mine), str(results)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert wrote(mine)
    mine.write_text(mine.read_text() + "\n")  # edited since: no longer what gemm-tune wrote
    again = subprocess.run([*run, "merge-results", str(mine), str(results)], capture_output=True, text=True)
    assert again.returncode == 12 and "or it changed since" in again.stderr
    forced = subprocess.run([*run, "merge-results", str(theirs), str(results), "--force"], capture_output=True)
    assert forced.returncode == 0 and theirs.read_text().startswith("Validator,")
    shapes = subprocess.run([*run, "shapes", str(UNTUNED), "--json", str(mine)], capture_output=True, text=True)
    assert shapes.returncode == 12 and "did not write it" in shapes.stderr
    assert main(["shapes", str(UNTUNED), "--json", str(mine), "--force"]) == 0 and wrote(mine)
    assert main(["shapes", str(UNTUNED), "--json", str(mine)]) == 0  # its own output, unchanged
