"""What a compiled workload did not send to the library: Inductor's autotuning tables (the format
``select_algorithm.log_results`` writes) and kept rows the tuned run never called (pad_mm's twins)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.formats.inductor_autotune import read_tables
from pipeline.formats.tunableop import parse_key
from pipeline.stages.gather.compiled import inductor_kernels, lines, never_run, padded_twin, section

FIXTURES = Path(__file__).parent / "fixtures" / "inductor"
SERVED = "GemmTunableOp_BFloat16_TN,tn_6144_8_4096_ld_4096_4096_6144"
TWIN = "GemmTunableOp_BFloat16_TN,tn_6144_16_4096_ld_4096_4096_6144"  # N 8 -> 16: pad_mm's twin
OTHER = "GemmTunableOp_BFloat16_TN,tn_4096_8_14336_ld_14336_14336_4096"


def test_autotune_tables_parse_with_their_choices_fastest_first():
    tables = read_tables((FIXTURES / "autotune_written.log").read_text().splitlines())
    assert [t.describe() for t in tables] == [
        "mm(8x4096, 4096x6144) torch.bfloat16, torch.bfloat16",
        "mm(8x4096, 4096x28672) torch.bfloat16, torch.bfloat16",
        "addmm(3584, 8x3584, 3584x3584) torch.bfloat16, torch.bfloat16, torch.bfloat16",
    ]
    first, second, third = tables
    assert (first.chosen, first.chosen_ms, first.library_ms, first.line) == ("triton_mm_4", 0.0123, 0.0150, 2)
    assert not first.sent_to_library and second.sent_to_library
    assert third.library_ms is None  # no extern choice in Inductor's top list


def test_only_gemms_inductor_kept_from_the_library_are_listed(tmp_path):
    found = inductor_kernels(FIXTURES / "autotune_written.log")
    assert [t.chosen for t in found] == ["triton_mm_4", "triton_mm_31"]
    assert inductor_kernels(tmp_path / "absent.log") == []


def test_padded_twin_is_a_rounded_up_copy_of_the_same_gemm():
    served, twin, other = (parse_key(*k.split(",", 1)) for k in (SERVED, TWIN, OTHER))
    assert padded_twin(twin, served)
    assert not padded_twin(served, twin)  # smaller is no padding
    assert not padded_twin(other, served) and not padded_twin(served, served)
    odd = parse_key(*["GemmTunableOp_BFloat16_TN", "tn_6144_13_4096_ld_4096_4096_6144"])
    assert not padded_twin(odd, served)  # 13 is not an aligned size


def test_kept_rows_never_run_name_their_twin_or_say_they_did_not_run():
    tuned_calls = {f"Gemm_Cublaslt_id_66 {SERVED}": 12, f"Gemm_Cublaslt_id_31 {OTHER}": 0}
    unused = never_run([SERVED, TWIN, OTHER], [SERVED, TWIN, OTHER], tuned_calls)
    assert [u["key"] for u in unused] == [OTHER, TWIN]
    assert unused[1]["reason"].startswith(f"padded twin of {SERVED}")
    assert unused[0]["reason"].startswith("recorded but not called in the tuned run")
    # pad_mm's timing chose the padded shape: the unpadded original is the one left unrun
    padded_ran = {f"Gemm_Cublaslt_id_66 {TWIN}": 5}
    unused = never_run([SERVED, TWIN], [SERVED, TWIN], padded_ran)
    assert [u["key"] for u in unused] == [SERVED]
    assert unused[0]["reason"].startswith(f"unpadded twin of {TWIN}")


def test_section_reads_the_collect_log_and_the_runtime_status(tmp_path):
    (tmp_path / "collect").mkdir()
    (tmp_path / "collect" / "workload.stderr.log").write_text((FIXTURES / "autotune_written.log").read_text())
    e2e = {"runtime": {"installed": True, "tuned_calls": {f"Gemm_Cublaslt_id_66 {SERVED}": 3}}}
    facts = section(tmp_path, [SERVED, TWIN], [SERVED, TWIN], e2e)
    assert [t["kernel"] for t in facts["inductor_kernels"]] == ["triton_mm_4", "triton_mm_31"]
    assert [u["key"] for u in facts["never_run"]] == [TWIN]
    text = lines(facts)
    assert text[0].startswith(
        "mm(8x4096, 4096x6144) torch.bfloat16, torch.bfloat16: not sent to the library; "
        "Inductor compiled its own kernel triton_mm_4 (0.0123 ms against the library's best "
        "0.0150 ms; collect/workload.stderr.log line 2)"
    )
    assert "no library choice in Inductor's top list" in text[1]
    assert text[2].startswith(f"{TWIN}: padded twin")
    json.dumps(facts)  # it goes into summary.json
    assert section(tmp_path, [SERVED], [SERVED], {})["never_run"] == []  # no runtime ran: nothing claimed


@pytest.mark.parametrize("name", ["mm", "addmm", "bias_addmm", "bmm", "_scaled_mm"])
def test_library_choices_are_aten_externs(name):
    table = read_tables(["AUTOTUNE mm(1x2, 2x3)", f"  {name} 0.0100 ms 100.0% "])[0]
    assert table.sent_to_library


def test_the_h100_max_autotune_log_reads_as_torch_wrote_it():
    """torch 2.11 on the H100, a Llama-3-8B-shaped model decoding at batch 8 under max-autotune."""
    tables = read_tables((FIXTURES / "llama3-8b_b8_max-autotune_h100.stderr.log").read_text().splitlines())
    assert len(tables) == 5 and all(t.op == "mm" and t.dtypes == "torch.bfloat16, torch.bfloat16" for t in tables)
    assert all(t.choices == sorted(t.choices, key=lambda c: c[1]) for t in tables), "fastest first"
    lm_head = [t for t in tables if t.sizes == "8x4096, 4096x128256"]
    assert lm_head and all(not t.sent_to_library and t.library_ms > t.chosen_ms for t in lm_head)
    assert any(t.sent_to_library for t in tables)  # the library kept some (gate_up: mm 0.0528 ms first)
