"""The TunableOp -> hipBLASLt/TensileLite frame mapping on worked examples."""

from __future__ import annotations

import pytest

from pipeline.formats.rocm import UnknownArchError, get_arch, is_packed, problem_type_name, to_amd
from pipeline.formats.tunableop import parse_key


def test_linear_with_bias():
    # F.linear(x[64, 4096], W[11008, 4096], b): recorded tn_11008_64_4096; hipBLASLt A = W, transposed
    amd = to_amd(parse_key("GemmAndBiasTunableOp_BFloat16_TN", "tn_11008_64_4096_ld_4096_4096_11008"))
    assert (amd.trans_a, amd.trans_b, amd.m, amd.n, amd.k, amd.batch) == (True, False, 11008, 64, 4096, 1)
    assert (amd.lda, amd.ldb, amd.ldc, amd.ldd) == (4096, 4096, 11008, 11008)
    assert amd.find_exact_size == [11008, 64, 1, 4096]
    assert amd.tensile_exact == [11008, 64, 1, 4096, 11008, 11008, 4096, 4096]  # M,N,B,K,LDD,LDC,LDA,LDB


def test_batched_matmul():
    # bmm(A[8, 128, 64], B[8, 64, 128]): nn_128_128_64_B_8 with lda = m, ldb = k
    amd = to_amd(parse_key("GemmStridedBatchedTunableOp_BFloat16_NN", "nn_128_128_64_B_8_ld_128_64_128"))
    assert amd.find_exact_size == [128, 128, 8, 64]
    assert amd.tensile_exact == [128, 128, 8, 64, 128, 128, 128, 64]


def test_torch26_keys_get_packed_lds():
    nt = parse_key("GemmTunableOp_float_NT", "nt_1024_512_256")
    amd = to_amd(nt)
    assert (amd.lda, amd.ldb, amd.ldc) == (1024, 512, 1024)  # A m x k (N): m; B^T stored n x k (T): n
    assert is_packed(nt)
    assert not is_packed(parse_key("GemmTunableOp_BFloat16_TN", "tn_6144_128_4096_ld_4224_4224_6144"))


def test_padded_lds_reach_the_tensile_tuple():
    amd = to_amd(parse_key("GemmTunableOp_BFloat16_TN", "tn_6144_128_4096_ld_4224_4224_6144"))
    assert amd.tensile_exact == [6144, 128, 1, 4096, 6144, 6144, 4224, 4224]


def test_wildcards_have_no_frame():
    with pytest.raises(ValueError, match="wildcard"):
        to_amd(parse_key("GemmTunableOp_BFloat16_TN", "tn_6144_*_4096_ld_4096_4096_6144"))


@pytest.mark.parametrize(
    ("op", "params", "generation", "name"),
    [  # TensileLite's names (docs/upstream.md, "TensileLite ProblemType names"): S24 concatenates, 2025 joins
        ("GemmTunableOp_BFloat16_NN", "nn_8_8_8", "2025", "Cijk_Ailk_Bljk_BBS_BH_UserArgs"),
        ("GemmTunableOp_Half_NT", "nt_8_8_8", "2024", "Cijk_Ailk_Bjlk_HHS_BH_UserArgs"),
        ("GemmTunableOp_float_TN", "tn_8_8_8", "2025", "Cijk_Alik_Bljk_S_B_UserArgs"),
        ("GemmTunableOp_float_TN", "tn_8_8_8", "2024", "Cijk_Alik_Bljk_SB_UserArgs"),
        ("GemmTunableOp_double_TT", "tt_8_8_8", "2025", "Cijk_Alik_Bjlk_D_B_UserArgs"),
        ("GemmAndBiasTunableOp_BFloat16_TN", "tn_8_8_8", "2025", "Cijk_Alik_Bljk_BBS_BH_Bias_B_UserArgs"),
        ("GemmAndBiasTunableOp_BFloat16_TN", "tn_8_8_8", "2024", "Cijk_Alik_Bljk_BBS_BH_BiasB_UserArgs"),
        ("GemmAndBiasTunableOp_float_TN", "tn_8_8_8", "2024", "Cijk_Alik_Bljk_SB_Bias_UserArgs"),
        (
            "ScaledGemmTunableOp_Float8_e4m3fn_Float8_e4m3fn_Half_TN",
            "tn_8_8_8",
            "2025",
            "Cijk_Alik_Bljk_F8HS_BH_SAB_UserArgs",
        ),
        (
            "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN",
            "tn_8_8_8_ld_8_8_8_rw_1_bias_BFloat16",
            "2025",
            "Cijk_Alik_Bljk_F8NBS_BH_Bias_B_SABV_UserArgs",
        ),
        (
            "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN",
            "tn_8_8_8_ld_8_8_8_rw_1_bias_BFloat16",
            "2024",
            "Cijk_Alik_Bljk_F8BS_BH_BiasB_SABV_UserArgs",
        ),
        (
            "ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e5m2fnuz_BFloat16_TN",
            "tn_8_8_8_ld_8_8_8_rw_0_bias_None",
            "2025",
            "Cijk_Alik_Bljk_F8B8NBS_BH_SAB_UserArgs",
        ),
    ],
)
def test_problem_type_names(op, params, generation, name):
    assert problem_type_name(parse_key(op, params), generation) == name


def test_arch_table():
    assert (get_arch("gfx942").schedule, get_arch("gfx90a").schedule) == ("aquavanjaram", "aldebaran")
    with pytest.raises(UnknownArchError, match="unknown arch 'gfx1100'; known: gfx942, gfx90a, gfx950"):
        get_arch("gfx1100")
