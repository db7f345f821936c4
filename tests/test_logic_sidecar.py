"""ExactLogic sidecars (formats/logic_sidecar.py, docs/upstream.md "ExactLogic sidecars"): both generations round
trip, a split GridBased file reads as its inline twin, a merge writes the table back the way the base keeps it,
and a corrupt or ambiguous sidecar is refused naming the file. The fixture is an upstream GridBased file (hipBLASLt
7d9fb683, aquavanjaram/gfx942)."""

from __future__ import annotations

import lzma
import shutil

import pytest
import yaml

from pipeline.cli import main
from pipeline.formats import logic_sidecar as sc
from pipeline.formats.logic import dump_logic, load_logic
from pipeline.stages.merge.logic_merge import MergeOptions, merge_dirs

from .helpers import FIXTURES

GRID = FIXTURES / "logic" / "aquavanjaram_Cijk_Ailk_Bjlk_I8II_BH_HAI_SAV_UserArgs.yaml"
MIXED = [[[5, 1, 1, 2], [3, 0.5]], [[1, 2, 1, 4], [0, 0]], [[1, 2, 1, 3], [1, ".inf"]], [[9, 9, 9, 9], [2, None]]]


def _split(directory, suffix=sc.COLUMNAR):
    """The fixture as upstream's split leaves it: the YAML with a null table, the table in the sidecar."""
    logic = load_logic(GRID)
    rows = logic.exact_logic
    logic.exact_logic = None
    path = directory / GRID.name
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_logic(logic))
    (directory / f"{GRID.name}{suffix}").write_bytes(sc.encode(rows, suffix))
    return path, rows


@pytest.mark.parametrize("suffix", sc.SUFFIXES)
def test_both_generations_round_trip_sorted_by_key(suffix):
    back = sc.decode(sc.encode(MIXED, suffix), f"t.yaml{suffix}")
    assert [row[0] for row in back] == sorted(row[0] for row in MIXED)
    if suffix == sc.COLUMNAR:  # every speed with its type: 0 stays an int, '.inf' a str, null None
        assert back == sorted(MIXED, key=lambda r: r[0]) and type(back[1][1][1]) is int
    else:  # the CSV generation stores no speed
        assert {row[1][1] for row in back} == {0.0} and [r[1][0] for r in back] == [1, 0, 3, 2]
    payload = lzma.decompress(sc.encode(MIXED, suffix))
    assert payload.startswith(b"TLXL\x02\x04" if suffix == sc.COLUMNAR else b"M,N,batch,K,solutionIdx\n1,2,1,3,1\n")


@pytest.mark.parametrize("suffix", sc.SUFFIXES)
def test_a_split_upstream_file_reads_as_its_inline_twin_and_a_merge_keeps_it_split(tmp_path, suffix):
    path, rows = _split(tmp_path / "base", suffix)
    assert yaml.safe_load(path.read_text())[7] is None
    loaded = load_logic(path)
    expected = sorted(rows, key=lambda r: r[0]) if suffix == sc.COLUMNAR else [[k, [i, 0.0]] for k, (i, _) in rows]
    assert loaded.sidecar == suffix and loaded.exact_logic == expected
    new = load_logic(GRID)
    new.exact_logic = [[[1, 1, 1, 128], [0, 0.5]], [[64, 64, 1, 64], [0, 0.3]]]
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / GRID.name).write_text(dump_logic(new))
    shutil.copy(path, tmp_path / "base" / "copied.yaml")
    (tmp_path / "base" / f"copied.yaml{suffix}").write_bytes((tmp_path / "base" / f"{GRID.name}{suffix}").read_bytes())
    merge_dirs(tmp_path / "base", tmp_path / "new", tmp_path / "out", MergeOptions())
    out = tmp_path / "out" / GRID.name
    assert yaml.safe_load(out.read_text())[7] is None and (tmp_path / "out" / f"{GRID.name}{suffix}").is_file()
    merged = {tuple(k): v for k, v in load_logic(out).exact_logic}
    assert (64, 64, 1, 64) in merged and len(merged) == len(rows) + 1, "the new size added, every base size kept"
    assert (tmp_path / "out" / f"copied.yaml{suffix}").read_bytes() == (
        tmp_path / "base" / f"copied.yaml{suffix}"
    ).read_bytes(), "a file copied as it is takes its sidecar along"


def test_a_corrupt_or_ambiguous_sidecar_is_refused_naming_the_file(tmp_path, capsys):
    path, rows = _split(tmp_path / "base")
    side = tmp_path / "base" / f"{GRID.name}{sc.COLUMNAR}"
    good = side.read_bytes()
    for blob, why in (
        (b"garbage", "not an xz stream"),
        (lzma.compress(b"TLXX\x02\x00\x00"), "bad magic"),
        (lzma.compress(b"TLXL\x03\x00\x00"), "TLXL version 3, not 2"),
        (lzma.compress(lzma.decompress(good)[:-3]), "truncated"),
        (lzma.compress(lzma.decompress(good) + b"\x00"), "bytes after the speeds"),
    ):
        side.write_bytes(blob)
        with pytest.raises(sc.SidecarError, match=rf"{side.name}: .*{why}"):
            load_logic(path)
    side.write_bytes(good)
    (tmp_path / "new").mkdir()
    inline = tmp_path / "base" / GRID.name
    inline.write_text(GRID.read_text())  # the table inline too
    with pytest.raises(sc.SidecarError, match=rf"{GRID.name}: its ExactLogic is inline and in {side.name} too"):
        load_logic(inline)
    equality = load_logic(GRID)
    equality.data[7], equality.data[11] = None, "Equality"
    inline.write_text(dump_logic(equality))
    with pytest.raises(sc.SidecarError, match="LibraryType is 'Equality'"):
        load_logic(inline)
    _split(tmp_path / "both")
    (tmp_path / "both" / f"{GRID.name}{sc.CSV}").write_bytes(sc.encode(rows, sc.CSV))
    with pytest.raises(sc.SidecarError, match="ambiguous"):
        load_logic(tmp_path / "both" / GRID.name)
    side.write_bytes(b"garbage")
    _split(tmp_path / "base2")
    (tmp_path / "base2" / f"{GRID.name}{sc.COLUMNAR}").write_bytes(b"garbage")
    before = {p.name: p.read_bytes() for p in (tmp_path / "base2").iterdir()}
    assert main(["merge-logic", str(tmp_path / "base2"), str(tmp_path / "new"), str(tmp_path / "out")]) == 12
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an xz stream" in err[0] and GRID.name in err[0]
    assert {p.name: p.read_bytes() for p in (tmp_path / "base2").iterdir()} == before, "inputs untouched"


def test_a_new_gridbased_file_joins_a_tree_that_keeps_its_tables_in_sidecars_the_same_way(tmp_path):
    """Where upstream would: a GridBased file only in NEW (TensileLite writes its tables inline) goes into a merged
    tree whose base keeps tables in sidecars with one of its own, of the base's generation; into an inline tree it
    is copied as it is."""
    _split(tmp_path / "split", sc.CSV)
    (tmp_path / "inline").mkdir()
    shutil.copy(GRID, tmp_path / "inline" / GRID.name)
    fresh = load_logic(GRID)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "fresh.yaml").write_text(dump_logic(fresh))
    report = merge_dirs(tmp_path / "split", tmp_path / "new", tmp_path / "out", MergeOptions())
    assert "fresh.yaml: new file, copied (its table into a sidecar" in "\n".join(report.lines)
    assert yaml.safe_load((tmp_path / "out" / "fresh.yaml").read_text())[7] is None
    assert load_logic(tmp_path / "out" / "fresh.yaml").exact_logic == [[k, [i, 0.0]] for k, (i, _) in fresh.exact_logic]
    merge_dirs(tmp_path / "inline", tmp_path / "new", tmp_path / "plain", MergeOptions())
    assert (tmp_path / "plain" / "fresh.yaml").read_bytes() == (tmp_path / "new" / "fresh.yaml").read_bytes()
    assert not list((tmp_path / "plain").glob("*.xz"))
