from __future__ import annotations

import luigi
import pytest

from pipeline import MergeLogic, MergeResults
from pipeline.cli import main
from pipeline.formats.hipblaslt_override import OverrideFormatError, merge_overrides, parse_override, read_override
from pipeline.formats.tunableop import parse_text, read_file
from pipeline.stages.merge.results_merge import merge_results

from .logic_factory import logic, solution, write

QKV = "GemmTunableOp_BFloat16_TN,tn_6144_128_4096_ld_4096_4096_6144"
O_PROJ = "GemmTunableOp_BFloat16_TN,tn_4096_128_4096_ld_4096_4096_4096"
VALIDATORS = "Validator,PT_VERSION,2.11.0\n"


def _file(text, name):
    return parse_text(text, name)


def test_fastest_row_first_one_validator_block():
    a = _file(f"{VALIDATORS}{QKV},Default,0.050\n{O_PROJ},Default,0.030\n", "a.csv")
    b = _file(
        f"{VALIDATORS}{QKV},Gemm_Cublaslt_id_66_tile_20_stages_8,0.041\n{O_PROJ},Gemm_Cublaslt_id_1,0.031\n"
        f"{QKV},Default\n",
        "b.csv",
    )
    merged = merge_results([a, b])
    assert merged.validators == {"PT_VERSION": "2.11.0"}
    assert [(e.params_signature, e.solution) for e in merged.entries] == [
        ("tn_6144_128_4096_ld_4096_4096_6144", "Gemm_Cublaslt_id_66_tile_20_stages_8"),
        ("tn_4096_128_4096_ld_4096_4096_4096", "Default"),
    ]
    text = "\n".join(merged.lines)
    assert "replaces Default (0.050 ms)" in text and "kept Default (0.030 ms)" in text
    assert "kept Gemm_Cublaslt_id_66_tile_20_stages_8 (0.041 ms) over Default (None ms, b.csv)" in text
    assert merged.lines[-1] == "5 rows from 2 files -> 2 rows"


def test_differing_validators_are_refused_unless_a_target_is_named():
    a = _file(f"{VALIDATORS}Validator,HIP_VERSION,70051831\n{QKV},Gemm_Hipblaslt_572,0.05\n", "a.csv")
    b = _file(f"{VALIDATORS}Validator,HIP_VERSION,70151831\n{QKV},Gemm_Hipblaslt_9,0.04\n", "b.csv")
    with pytest.raises(ValueError) as err:
        merge_results([a, b])
    assert "b.csv: HIP_VERSION = '70151831', target has '70051831'" in str(err.value)
    merged = merge_results([a, b], target=b.validators)
    assert merged.validators["HIP_VERSION"] == "70151831" and merged.entries[0].solution == "Gemm_Hipblaslt_9"
    assert merged.lines[0].startswith("note: a.csv: HIP_VERSION")


def test_untuned_inputs_and_missing_pt_version_are_refused():
    with pytest.raises(ValueError, match=r"u\.csv: 1 rows have no solution"):
        merge_results([_file(f"{QKV}\n", "u.csv")])
    with pytest.raises(ValueError, match="no PT_VERSION"):
        merge_results([_file(f"{QKV},Default,0.1\n", "n.csv")])


def test_cli_merge_results_writes_a_torch_readable_file(tmp_path, capsys):
    (tmp_path / "a.csv").write_text(f"{VALIDATORS}{QKV},Default,0.05\n")
    (tmp_path / "b.csv").write_text(
        f"{VALIDATORS}{QKV},Gemm_Cublaslt_id_66_tile_20_stages_8,0.04\n{O_PROJ},Default,0.03\n"
    )
    out = tmp_path / "merged.csv"
    assert main(["merge-results", str(out), str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]) == 0
    assert out.read_text() == (f"{VALIDATORS}{QKV},Gemm_Cublaslt_id_66_tile_20_stages_8,0.04\n{O_PROJ},Default,0.03\n")
    assert len(read_file(out).entries) == 2
    (tmp_path / "c.csv").write_text(f"Validator,PT_VERSION,2.12.0\n{QKV},Default,0.01\n")
    assert main(["merge-results", str(out), str(tmp_path / "a.csv"), str(tmp_path / "c.csv")]) == 12
    assert "validators differ" in capsys.readouterr().err
    assert (
        main(
            [
                "merge-results",
                str(out),
                str(tmp_path / "a.csv"),
                str(tmp_path / "c.csv"),
                "--validators-from",
                str(tmp_path / "c.csv"),
            ]
        )
        == 0
    )
    assert out.read_text().startswith("Validator,PT_VERSION,2.12.0\n")


HEADER = "transA,transB,batch_count,m,n,k,a_type,b_type,c_type,d_type,compute_type,us,solution_index"


def test_override_files_merge(tmp_path, capsys):
    a = tmp_path / "a.txt"
    a.write_text(
        f"Git Version: 6c70ef2a\n{HEADER}\nT,N,1,6144,128,4096,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,21.5,572\n"
        f"{HEADER}\nT,N,1,4096,128,4096,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,14.0,33\n"
    )
    b = tmp_path / "b.txt"
    b.write_text(f"Git Version: 6c70ef2a\n{HEADER}\nT,N,1,6144,128,4096,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,19.0,811\n")
    out = tmp_path / "out.txt"
    assert main(["merge-results", str(out), str(a), str(b)]) == 0
    merged = read_override(out)
    assert merged.git_version == "6c70ef2a"
    assert [dict(e.fields)["solution_index"] for e in merged.entries] == ["811", "572", "33"], (
        "the reader keeps both entries of the 6144 key and tries them in file order: the faster one first"
    )
    assert out.read_text().count(HEADER) == 3
    c = tmp_path / "c.txt"
    c.write_text(f"Git Version: 0000beef\n{HEADER}\nT,N,1,6144,128,4096,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,9.0,5\n")
    with pytest.raises(ValueError, match="different hipBLASLt builds"):
        merge_overrides([read_override(a), read_override(c)])
    git, entries, lines = merge_overrides([read_override(a), read_override(c)], target_git="0000beef")
    assert git == "0000beef" and [dict(e.fields)["solution_index"] for e in entries] == ["5"], (
        "rows of another build are dropped, never relabelled with the target's Git Version"
    )
    assert sum("dropped" in line and "'6c70ef2a'" in line for line in lines) == 2
    with pytest.raises(OverrideFormatError, match=r"x.txt:2: a value line before any header line"):
        parse_override("Git Version: 1\nT,N,1,1,1,1\n", "x.txt")
    with pytest.raises(OverrideFormatError, match=r"x.txt:3: 2 values for 13 columns"):
        parse_override(f"Git Version: 1\n{HEADER}\nT,N\n", "x.txt")
    assert main(["merge-results", str(out), str(a), str(tmp_path / "missing.txt")]) == 12
    capsys.readouterr()


def test_luigi_merge_tasks(tmp_path):
    (tmp_path / "r0.csv").write_text(f"{VALIDATORS}{QKV},Default,0.05\n")
    (tmp_path / "r1.csv").write_text(f"{VALIDATORS}{QKV},Gemm_Cublaslt_id_66_tile_20_stages_8,0.04\n")
    write(tmp_path / "base", "x.yaml", logic([[[64, 64, 1, 64], [0, 5.0]]], [solution(128)]))
    write(tmp_path / "new", "x.yaml", logic([[[64, 64, 1, 64], [0, 9.0]]], [solution(256)]))
    tasks = [
        MergeResults(workdir=str(tmp_path / "w"), run_name="r", results=str(tmp_path / "r?.csv")),
        MergeLogic(
            workdir=str(tmp_path / "w"),
            run_name="r",
            base_logic=str(tmp_path / "base"),
            new_logic=str(tmp_path / "new"),
        ),
    ]
    assert luigi.build(tasks, local_scheduler=True, log_level="WARNING")
    merged = read_file(tmp_path / "w" / "r" / "merge" / "tunableop_results.csv")
    assert [e.solution for e in merged.entries] == ["Gemm_Cublaslt_id_66_tile_20_stages_8"]
    assert "replaced [64, 64, 1, 64]" in (tmp_path / "w" / "r" / "merge" / "logic-merge.log").read_text()
    assert (tmp_path / "w" / "r" / "merge" / "logic" / "x.yaml").exists()
    missing = str(tmp_path / "no-such-untuned.csv")  # fails on any machine, GPU or not
    assert not luigi.build(
        [MergeResults(workdir=str(tmp_path / "w"), run_name="empty", untuned=missing)],
        local_scheduler=True,
        log_level="CRITICAL",
    )


def test_the_merge_task_merges_override_files_given_with_the_results(tmp_path):
    """--results may name hipBLASLt override files beside TunableOp results: each kind is merged with its own,
    by the same function as merge-results."""
    rocm = "Validator,PT_VERSION,2.11.0\nValidator,HIPBLASLT_VERSION,100200-6c70ef2a\n"
    (tmp_path / "r0.csv").write_text(
        f"{rocm}GemmTunableOp_BFloat16_TN,tn_6144_128_4096_ld_4096_4096_6144,Gemm_Hipblaslt_572,0.0215\n"
    )
    (tmp_path / "o0.txt").write_text(
        f"Git Version: 6c70ef2a\n{HEADER}\nT,N,1,6144,128,4096,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,21.5,572\n"
    )
    (tmp_path / "o1.txt").write_text(
        f"Git Version: 6c70ef2a\n{HEADER}\n"
        "T,N,1,6144,128,4096,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,19.0,811\n"
        f"{HEADER}\nT,N,1,4096,128,4096,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,14.0,33\n"
    )
    task = MergeResults(
        workdir=str(tmp_path / "w"),
        run_name="r",
        backend="hipblaslt",
        results=",".join(str(tmp_path / n) for n in ("r0.csv", "o0.txt", "o1.txt")),
    )
    assert luigi.build([task], local_scheduler=True, log_level="WARNING")
    merge = tmp_path / "w" / "r" / "merge"
    assert [e.solution for e in read_file(merge / "tunableop_results.csv").entries] == ["Gemm_Hipblaslt_572"]
    override = read_override(merge / "hipblaslt_override.txt")
    assert [dict(e.fields)["solution_index"] for e in override.entries] == ["811", "572", "33"]
    only_overrides = MergeResults(
        workdir=str(tmp_path / "w"), run_name="o", backend="hipblaslt", results=str(tmp_path / "o0.txt")
    )
    assert not luigi.build([only_overrides], local_scheduler=True, log_level="CRITICAL")


CURRENT = (
    "schema_version,git_version,transA,transB,m,n,k,batch_count,a_type,b_type,c_type,d_type,compute_type,"
    "compute_input_type_a,compute_input_type_b,lda,ldb,ldc,ldd,stride_a,stride_b,stride_c,stride_d,lde,stride_e,"
    "batch_mode,epilogue,gradient,bias_type,bias_stride,bias_vector,aux_type,scaleA_format,scaleB_format,scaleA,"
    "scaleB,scaleC,scaleD,scaleE,scaleAlphaVec,amaxD,swizzle_a,swizzle_b,streamk_tile_scheduling,sm_count_target,"
    "uniform_summation_order,gcnArchName,CUs,solution_index,kernel_name,required_workspace,us"
)


def _current(index: int, us: float, lda: int = 4096, scale_format: int = 0, kernel: str = "K") -> str:
    """A current-schema row as TuningCacheStore.cpp's formatTuningRow writes it (an FP8 6144x128x4096 GEMM)."""
    values = (
        f"1,6c70ef2a,T,N,6144,128,4096,1,f8_fnuz_r,f8_fnuz_r,bf16_r,bf16_r,f32_r,0,0,{lda},4096,6144,6144,"
        f"0,0,0,0,0,0,0,1,0,0,0,0,0,{scale_format},{scale_format},1,1,0,0,0,0,0,0,0,0,0,0,gfx942:sramecc+:xnack-,"
        f"304,{index},{kernel}{index},0,{us}"
    )
    return f"    {CURRENT}\n{values}\n"


def test_override_merge_keeps_what_the_reader_keeps():
    """TuningCacheStore: a current row keys on ld's and scale formats, so ld twins and a tensorwise/rowwise
    pair are four keys; a key keeps every distinct entry (index and names) and one of a repeat; the reader
    tries current entries newest first, so the fastest is written last."""
    a = parse_override(
        "Git Version: 6c70ef2a\n"
        + _current(5, 20.0)
        + _current(6, 21.0, lda=4224)
        + _current(7, 19.0, scale_format=1)
        + _current(8, 18.0),
        "a.txt",
    )
    b = parse_override("Git Version: 6c70ef2a\n" + _current(5, 19.5) + _current(9, 17.5), "b.txt")
    git, entries, lines = merge_overrides([a, b])
    assert git == "6c70ef2a"
    rows = [(dict(e.fields)["solution_index"], dict(e.fields)["us"]) for e in entries]
    assert rows == [("5", "19.5"), ("8", "18.0"), ("9", "17.5"), ("6", "21.0"), ("7", "19.0")], rows
    assert len({e.key for e in entries}) == 3 and any("repeats solution 5" in line for line in lines)
    # a legacy row keys on neither ld's nor d_type: two of one shape are one key, kept both, fastest first
    legacy = parse_override(
        f"Git Version: 6c70ef2a\n{HEADER}\nT,N,1,6144,128,4096,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,21.5,572\n"
        f"{HEADER}\nT,N,1,6144,128,4096,bf16_r,bf16_r,bf16_r,f32_r,f32_r,19.0,811\n",
        "l.txt",
    )
    _, entries, _ = merge_overrides([legacy])
    assert [dict(e.fields)["solution_index"] for e in entries] == ["811", "572"]
    assert len({e.key for e in entries}) == 1 and not entries[0].current


def test_the_bundle_ships_current_rows_of_a_shape_kept_with_two_scalings(tmp_path):
    """A tensorwise and a rowwise FP8 GEMM of one shape, both kept: their legacy rows share the reader's key
    (left out, reported), their current rows key on the scale formats (shipped)."""
    from types import SimpleNamespace

    from pipeline.formats.tunableop import parse_key
    from pipeline.stages.validate.bundle import _kept_overrides

    op = "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN"
    kept = [
        SimpleNamespace(problem=parse_key(op, f"tn_6144_128_4096_ld_4096_4096_6144_rw_{rw}_bias_None")) for rw in (0, 1)
    ]
    legacy = f"{HEADER}\nT,N,1,6144,128,4096,f8_fnuz_r,f8_fnuz_r,bf16_r,bf16_r,f32_r,19.0,811\n"
    source = tmp_path / "merged.txt"
    source.write_text("Git Version: 6c70ef2a\n" + legacy + _current(5, 20.0) + _current(7, 19.0, scale_format=1))
    meta = _kept_overrides(source, kept, tmp_path / "out.txt")
    shipped = read_override(tmp_path / "out.txt").entries
    assert [dict(e.fields)["solution_index"] for e in shipped] == ["5", "7"] and all(e.current for e in shipped)
    assert meta["rows"] == 2 and len(meta["left_out"]) == 1 and "differ in their scaling" in meta["left_out"][0]
