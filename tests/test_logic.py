from __future__ import annotations

import pytest
import yaml

from pipeline.formats.logic import LogicFormatError, Winner, create_equality, cublaslt_equality, dump_logic, parse_logic

from .logic_factory import PROBLEM_TYPE, logic, solution


def test_list_layout_round_trips():
    data = logic(
        [[[4096, 128, 1, 4096], [1, 812.5]], [[6144, 128, 1, 4096, 6144, 6144, 4096, 4096], [0, 0.0]]],
        [solution(128, 0), solution(256, 1)],
    )
    text = yaml.safe_dump(data, default_flow_style=None)
    parsed = parse_logic(text, "x.yaml")
    assert parsed.layout == "list" and parsed.library_type == "Equality"
    assert dump_logic(parsed) == text
    assert parsed.exact_logic[1][0][4:] == [6144, 6144, 4096, 4096]


def test_mapping_layout_loads_and_fills_defaults():
    data = {
        "MinimumRequiredVersion": "5.0.0",
        "ScheduleName": "aquavanjaram",
        "ArchitectureName": "gfx942",
        "CUCount": 304,
        "DeviceNames": ["Device 0049"],
        "ProblemType": dict(PROBLEM_TYPE),
        "DefaultSolution": {"GlobalSplitU": 1, "StaggerU": 32},
        "Solutions": [{"SolutionIndex": 0, "MacroTile0": 128}, {"SolutionIndex": 1, "GlobalSplitU": 4}],
        "IndexOrder": [2, 3, 0, 1],
        "ExactLogic": [[[64, 64, 1, 64], [1, 10.0]]],
        "RangeLogic": None,
        "TileSelectionIndices": None,
        "PerfMetric": "DeviceEfficiency",
        "LibraryType": "Equality",
    }
    parsed = parse_logic(yaml.safe_dump(data, sort_keys=False))
    assert parsed.layout == "mapping"
    assert parsed.full_solution(1) == {"GlobalSplitU": 4, "StaggerU": 32, "SolutionIndex": 1}
    assert list(yaml.safe_load(dump_logic(parsed))) == list(data)  # field order kept


def test_freesize_without_rows():
    parsed = parse_logic(yaml.safe_dump(logic(None, [solution(128)], library_type="FreeSize")))
    assert parsed.exact_logic is None


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("- [unclosed", "not YAML"),
        ("just a string", "neither a 12-item list nor a mapping"),
        (logic([], [])[:9], "has 12 items, this one 9"),
        (["v4", *logic([], [])[1:]], "item [0] must be {MinimumRequiredVersion"),
        (logic([], [], library_type="Exact"), "LibraryType 'Exact' is not one of"),
        ([*logic([], [])[:4], [], *logic([], [])[5:]], "ProblemType must be a mapping"),
        (logic([[[1, 1, 1, 1], [0, 1.0]]], ["not a dict"]), "Solutions must be a list of mappings"),
        (logic(None, [solution(128)]), "Equality logic needs ExactLogic rows"),
        (logic([[[1, 1, 1], [0, 1.0]]], [solution(128)]), "size [1, 1, 1] is not 4 or 8 non-negative integers"),
        (logic([[[1, 1, 1, 1], [3, 1.0]]], [solution(128)]), "solution index 3 is not one of the 1 solutions"),
        (logic([[[1, 1, 1, 1], [0, "fast"]]], [solution(128)]), "efficiency 'fast' is not a number"),
        (logic([[[1, 1, 1, 1], 0]], [solution(128)]), "ExactLogic row 0 is not [[size...], [index, efficiency]]"),
        ({"Solutions": []}, "mapping-format logic misses ProblemType, LibraryType"),
    ],
)
def test_malformed_logic_names_path_and_reason(data, reason):
    text = data if isinstance(data, str) else yaml.safe_dump(data)
    with pytest.raises(LogicFormatError) as err:
        parse_logic(text, "lib/bad.yaml")
    assert str(err.value).startswith("lib/bad.yaml: ") and reason in str(err.value)


def test_create_equality_follows_create_exact():
    source = parse_logic(
        yaml.safe_dump(logic(None, [solution(64, 0), solution(128, 1), solution(256, 2)], library_type="FreeSize")),
        "src.yaml",
    )
    winners = [
        Winner((4096, 128, 1, 4096), 1, 900.0),
        Winner((8192, 128, 1, 4096), 2, 1000.0),
        Winner((6144, 128, 1, 4096), 1, 950.0),
        Winner((4096, 8, 1, 4096), 1, 100.0, split_k=4),
    ]
    out = create_equality(source, winners)
    names = [s["SolutionNameMin"] for s in out.solutions]
    assert names == [
        "Cijk_Alik_Bljk_BBS_BH_MT128x128_GSU1_SU32",
        "Cijk_Alik_Bljk_BBS_BH_MT256x256_GSU1_SU32",
        "Cijk_Alik_Bljk_BBS_BH_MT128x128_GSU4_SU32",
    ]
    assert [s["SolutionIndex"] for s in out.solutions] == [0, 1, 2] and out.solutions[2]["GlobalSplitU"] == 4
    assert out.exact_logic == [
        [[4096, 128, 1, 4096], [0, 900.0]],
        [[8192, 128, 1, 4096], [1, 1000.0]],
        [[6144, 128, 1, 4096], [0, 950.0]],
        [[4096, 8, 1, 4096], [2, 100.0]],
    ]
    assert out.data[6] == [2, 3, 0, 1] and out.data[8] is None and out.library_type == "Equality"
    assert out.data[:5] == source.data[:5] and out.data[9:11] == source.data[9:11]
    assert source.solutions[1]["GlobalSplitU"] == 1, "the source is not modified"
    with pytest.raises(LogicFormatError, match=r"src\.yaml: winner .* names solution 7"):
        create_equality(source, [Winner((1, 1, 1, 1), 7, 1.0)])


def test_cublaslt_container():
    config = {
        "SolutionNameMin": "Gemm_Cublaslt_id_66_tile_20_stages_8_splitk_1_red_0_swizzle_0_custom_0",
        "AlgoId": 66,
        "Tile": 20,
        "Stages": 8,
        "SplitK": 1,
        "ReductionScheme": 0,
        "Swizzle": 0,
        "CustomOption": 0,
        "InnerShape": 0,
        "ClusterShape": 0,
        "AlgoBytes": "42000000",
    }
    other = {**config, "SplitK": 4, "SolutionNameMin": config["SolutionNameMin"].replace("splitk_1", "splitk_4")}
    out = cublaslt_equality(
        {"DataType": "bfloat16", "TransposeA": True, "TransposeB": False},
        "sm_90",
        ["NVIDIA H100 80GB HBM3"],
        [
            ((6144, 128, 1, 4096), config, 700.0),
            ((4096, 8, 1, 4096), other, 90.0),
            ((4096, 128, 1, 4096), config, 650.0),
        ],
    )
    assert [s["SolutionIndex"] for s in out.solutions] == [0, 1]
    assert out.solutions[0]["Backend"] == "cublaslt"
    assert [row[1][0] for row in out.exact_logic] == [0, 1, 0]
    again = parse_logic(dump_logic(out))
    assert again.data == out.data and again.data[1] == "cublaslt"
