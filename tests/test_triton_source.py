"""The Triton kernel source: which problems it serves and why not, the configs it offers per shape, its
compile cache's key (CPU, no torch); on the GPU, every offered config of a problem matches the fp32
reference, and a config that cannot run fails in the harness without failing the rest."""

from __future__ import annotations

import json

import pytest

from pipeline.kernels import triton_gemm as tg
from pipeline.kernels import triton_runner as tr
from pipeline.problem import TENSORWISE_E4M3, GemmProblem


def linear(n_out: int, tokens: int, k: int, **kw) -> GemmProblem:
    """``F.linear(x[tokens, k], W[n_out, k])`` as TunableOp records it."""
    return GemmProblem("gemm", "T", "N", n_out, tokens, k, k, k, n_out, **kw)


def scaled(n_out: int, tokens: int, k: int, **kw) -> GemmProblem:
    """A tensorwise-scaled ``torch._scaled_mm`` of e4m3 operands into bf16, as the 2.15 CUDA key records it."""
    return GemmProblem("scaled_gemm", "T", "N", n_out, tokens, k, k, k, n_out, **{**TENSORWISE_E4M3, **kw})


def test_it_serves_bf16_and_fp16_linears_and_says_why_not_the_rest():
    assert tg.serves(linear(4096, 1, 4096)) is None
    assert tg.serves(linear(4096, 8, 4096, a_type="float16", b_type="float16", c_type="float16")) is None
    assert tg.serves(GemmProblem("gemm_and_bias", "T", "N", 3584, 8, 3584, 3584, 3584, 3584)) is None
    assert tg.serves(GemmProblem("gemm_strided_batched", "T", "N", 128, 64, 64, 64, 64, 128, batch=8)) is None
    assert tg.serves(scaled(6144, 8, 4096)) is None and tg.serves(scaled(4096, 4, 4096, bias_type="bfloat16")) is None
    refused = {
        "NN": GemmProblem("gemm", "N", "N", 512, 128, 256, 512, 256, 512),
        "float32": linear(1024, 8, 512, a_type="float32", b_type="float32", c_type="float32"),
        "lda 4100": linear(4096, 4, 4100),
        "rowwise": scaled(4096, 16, 4096, scale_a_recipe=1, scale_b_recipe=1),
        "e4m3 into bf16": scaled(4096, 16, 4096, a_type="float8_e5m2", b_type="float8_e5m2"),
        "lda 4104": scaled(4096, 16, 4104),  # 16 one-byte elements make 16 bytes
    }
    for word, problem in refused.items():
        reason = tg.serves(problem)
        assert reason and word in reason, (word, reason)


@pytest.mark.parametrize(
    "problem",
    [
        linear(28672, 1, 4096),
        linear(4096, 8, 14336),
        linear(128256, 4, 4096),
        linear(152064, 1, 3584),
        linear(4096, 512, 4096),
        linear(3584, 8192, 3584),
        linear(256, 1, 4096),
    ],
    ids=["gate-up T=1", "down T=8", "lm_head T=4", "Qwen2 lm_head T=1", "prefill 512", "prefill 8192", "k_proj T=1"],
)
def test_configs_fit_the_shape(problem):
    found = tg.configs(problem, sms=132)
    assert found and len(found) == len(set(found))
    skinny = problem.n <= tg.SKINNY_ROWS
    one_token = {"literal"} if problem.m * problem.batch >= 2 * 132 else {"gemv"}  # a column a program fills it
    families = one_token if problem.n == 1 else {"skinny", "swapped"} if skinny else {"tiled"}
    assert {c.family for c in found} == families
    if families == {"tiled"}:
        assert {c.block_k for c in found} == {64}, "K tiles of 64 where K holds one"
    for c in found:
        if c.family == "gemv":  # a few columns per program: K split only where they leave the GPU short
            programs = -(-problem.m // c.block_c)
            assert c.split_k == 1 or (programs < 2 * 132 and problem.k // c.split_k >= c.block_k)
            assert c.block_c > 1 and c.num_stages == 1
            continue
        if c.family == "literal":  # the whole of K in one program, slices no longer than K's next power of two
            assert c.split_k == 1 and c.block_c == 1 and c.block_k < 2 * problem.k and c.num_stages == 1
            assert 2 <= c.block_c * c.block_k // (32 * c.num_warps) <= 32
            continue
        tiles = -(-problem.n // c.block_r) * -(-problem.m // c.block_c)
        assert problem.k // c.split_k >= c.block_k, "a K slice holds at least one K tile"
        assert c.split_k == 1 or tiles < 132, "no K split where the tiles fill the GPU"
        assert c.split_k == 1 or tiles * c.split_k <= 8 * 132
        stage_bytes = (c.block_r + c.block_c) * c.block_k * 2
        assert c.num_stages * stage_bytes <= 224 * 1024, "the pipeline's stages fit the shared memory"
        assert tg.TritonConfig.from_json(json.loads(json.dumps(c.to_json()))) == c
        assert c.to_json()["source"] == "triton" and c.name.startswith("triton_")
    if skinny and problem.n > 1:
        assert any(c.split_k > 1 for c in found) == (-(-problem.m // 32) < 132)
        assert {c.num_stages for c in found if c.family == "skinny"} == {3, 4, 5}, "deep pipelines"


def test_one_token_gets_the_literal_kernel_alone_where_columns_fill_the_gpu_else_gemv():
    """The families Bench compiles are those that won somewhere (docs/triton.md, "What Bench compiles")."""
    for problem in (linear(4096, 1, 14336), scaled(6144, 1, 4096), linear(6144, 1, 300)):
        assert {c.family for c in tg.configs(problem, sms=132)} == {"literal"}
    for problem in (linear(256, 1, 4096), scaled(192, 1, 4096), linear(6144, 1, 256)):
        found = tg.configs(problem, sms=132)  # fewer than two programs per SM, or K shorter than a slice
        assert found and {c.family for c in found} == {"gemv"} and all(c.block_c > 1 for c in found)
        assert any(c.split_k > 1 for c in found) == (-(-problem.m // 16) < 2 * 132), "split where columns are few"
    assert {c.family for c in tg.configs(linear(256, 1, 4096), sms=4)} == {"literal"}, "counted against the SMs"
    short = tg.configs(linear(4096, 128, 48), sms=132)
    assert short and {c.block_k for c in short} == {32}, "a K shorter than 64: one 32-long K tile, masked"
    wide = tg.configs(linear(4096, 128, 4096), sms=132)
    assert {c.block_k for c in wide} == {64} and {c.block_r for c in wide} == {32, 64, 128}


def test_two_to_sixteen_tokens_also_get_the_swapped_tile():
    """Weights on the MMA's M side: 64 or 128 columns, 4 warps per 64, K split only where the 64-column tiles
    leave half the SMs idle; a name that says so, and a bundle's config from before the field still loads."""
    for tokens in (2, 4, 8, 16):
        swapped = [c for c in tg.configs(linear(4096, tokens, 4096), sms=132) if c.family == "swapped"]
        assert {c.block_c for c in swapped} == {64, 128} and all(c.num_warps == c.block_c // 16 for c in swapped)
        assert {c.split_k for c in swapped} == {1, 2, 4} and all(c.block_c == 64 for c in swapped if c.split_k > 1)
    swap = "swapped"
    assert not [c for c in tg.configs(linear(4096, 1, 4096), sms=132) if c.family == swap], "one token: gemv"
    assert not [c for c in tg.configs(linear(4096, 17, 4096), sms=132) if c.family == swap], "beyond 16 rows"
    wide = [c for c in tg.configs(linear(28672, 4, 4096), sms=132) if c.family == swap]
    assert wide and {c.split_k for c in wide} == {1}, "448 tiles fill the GPU"
    fp8 = {(c.block_c, c.block_k, c.num_stages) for c in tg.configs(scaled(28672, 8, 4096), 132) if c.family == swap}
    bf16 = {(c.block_c, c.block_k, c.num_stages) for c in tg.configs(linear(28672, 8, 4096), 132) if c.family == swap}
    assert (64, 256, 6) in fp8 and (64, 256, 6) not in bf16, "six 80x256 stages fit one-byte operands alone"
    config = tg.TritonConfig(16, 64, 256, 1, 1, 4, 6, family="swapped")
    assert config.name == "triton_r16c64k256_s1_g1_w4_st6_swap" and tg.config_from_name(config.name) == config
    assert tg.config_from_name("triton_r16c64k256_s1_g1_w4_st6").family == "skinny"
    sizes = {"block_r": 16, "block_c": 64, "block_k": 256, "split_k": 1, "group": 1, "num_warps": 4, "num_stages": 6}
    before = {"source": "triton", "family": "skinny", "name": config.name[: -len("_swap")], **sizes}  # no flag yet
    assert tg.TritonConfig.from_json(before) == tg.TritonConfig(16, 64, 256, 1, 1, 4, 6)
    flagged = {"source": "triton", "family": "swapped", "name": config.name, **sizes, "swapped": True, "literal": False}
    assert tg.TritonConfig.from_json(flagged) == config, "saved while the family was a flag"
    assert tg.TritonConfig.from_json(json.loads(json.dumps(config.to_json()))) == config


def test_one_token_also_gets_the_literal_kernel_compiled_per_shape():
    """``gemv_literal``: one column a program over the whole of K in slices no longer than K's next power of
    two (docs/triton.md, "Literal sizes"); its names end ``_lit``, and a saved config from before the field
    loads as the plain kernel's."""
    literal = [c for c in tg.configs(linear(37888, 1, 3584), sms=132) if c.family == "literal"]
    assert {c.block_c for c in literal} == {1} and {c.block_k for c in literal} == {512, 2048, 4096}
    assert {(c.block_k, c.num_warps) for c in literal} == {
        (512, 4),
        (512, 8),
        *((k, w) for k in (2048, 4096) for w in (4, 8, 16)),
    }
    assert all(c.kernel == "gemv_literal" and c.split_k == 1 and c.num_stages == 1 for c in literal)

    def literal_of(problem):
        return [c for c in tg.configs(problem, 132) if c.family == "literal"]

    assert {c.block_k for c in literal_of(linear(4096, 1, 2048))} == {512, 2048}, "K's power of 2"
    assert not literal_of(linear(4096, 1, 256)), "K shorter than a slice"
    assert not literal_of(linear(4096, 4, 4096)), "one token alone"
    assert not literal_of(linear(256, 1, 4096)), "256 programs leave SMs idle"
    config = tg.TritonConfig(1, 1, 4096, 1, 1, 8, 1, family="literal")
    assert config.name == "triton_r1c1k4096_s1_g1_w8_st1_lit" and tg.config_from_name(config.name) == config
    assert tg.TritonConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    before = {k: v for k, v in config.to_json().items() if k != "family"} | {"name": config.name[: -len("_lit")]}
    assert tg.TritonConfig.from_json(before) == tg.TritonConfig(1, 1, 4096, 1, 1, 8, 1), "saved before the family"
    with pytest.raises(ValueError, match="_lit, _swap, _swr or neither"):
        tg.config_from_name("triton_r1c1k4096_s1_g1_w8_st1_lit_swap")


GPU_PROBLEMS = [
    linear(4096, 1, 4096),
    linear(1000, 1, 4104),  # one token, K not a multiple of any K tile, columns not a block multiple
    linear(200, 1, 4104),  # one token, too few columns for the literal kernel: gemv, split
    scaled(192, 1, 4096, bias_type="bfloat16"),
    GemmProblem("gemm_and_bias", "T", "N", 3584, 1, 3584, 3584, 3584, 3584),
    scaled(4096, 1, 4096, bias_type="bfloat16"),
    GemmProblem("gemm_strided_batched", "T", "N", 256, 1, 512, 512, 512, 256, batch=4),
    linear(6144, 4, 4104),  # K not a multiple of any K tile
    linear(3000, 8, 2048, a_type="float16", b_type="float16", c_type="float16"),  # columns not a tile multiple
    GemmProblem("gemm_and_bias", "T", "N", 3584, 8, 3584, 3584, 3584, 3584),
    GemmProblem("gemm_and_bias", "T", "N", 1536, 128, 768, 768, 768, 1536),
    linear(4096, 300, 4096),
    GemmProblem("gemm_strided_batched", "T", "N", 128, 64, 64, 64, 64, 128, batch=8),
    scaled(6144, 8, 4096),
    scaled(4096, 4, 4096, bias_type="bfloat16"),
    scaled(4096, 256, 4096),
]


def test_a_swapped_config_has_a_twin_that_takes_the_token_count_and_is_never_searched():
    """The twin Bench tries over a swapped winner's bucket (``bucket_score``): the same tile on ``swapped_range``,
    whose name parses back and which serves any count up to its 16 rows; no other family has one, and the search
    never offers it."""
    config = tg.TritonConfig(16, 64, 256, 2, 1, 4, 4, family="swapped")
    twin = tg.ranged_twin(config.name)
    assert twin == tg.TritonConfig(16, 64, 256, 2, 1, 4, 4, family="swapped_range") and twin.kernel == "swapped_range"
    assert twin.name == "triton_r16c64k256_s2_g1_w4_st4_swr" and tg.config_from_name(twin.name) == twin
    assert tg.TritonConfig.from_json(json.loads(json.dumps(twin.to_json()))) == twin
    assert tg.serves_range(twin.name, 1, 16) and not tg.serves_range(twin.name, 9, 17)
    assert not tg.serves_range(config.name, 5, 8), "the swapped tile itself: its own count alone"
    for other in ("triton_r16c64k256_s1_g1_w4_st6", "triton_r1c1k2048_s1_g1_w8_st1_lit", "Gemm_Cublaslt_id_7", "x"):
        assert tg.ranged_twin(other) is None, other
    assert tg.ranged_twin(twin.name) is None, "a twin has no twin"
    offered = {
        c.family for t in (2, 8, 16) for p in (linear(4096, t, 4096), scaled(4096, t, 4096)) for c in tg.configs(p, 132)
    }
    assert "swapped" in offered and "swapped_range" not in offered


@pytest.mark.gpu
@pytest.mark.gpu_untimed
@pytest.mark.parametrize(
    "problem",
    [
        scaled(4096, 8, 4096, bias_type="bfloat16"),
        GemmProblem("gemm_and_bias", "T", "N", 3000, 8, 2048, 2048, 2048, 3000),  # columns not a tile multiple
        GemmProblem("gemm_strided_batched", "T", "N", 256, 8, 4104, 4104, 4104, 256, batch=3),  # K not a tile multiple
    ],
    ids=lambda p: f"{p.op}-{p.m}x{p.k}-{p.a_type}",
)
def test_a_swapped_twin_matches_the_fp32_reference_at_every_count_it_serves(problem):
    """Each swapped config's twin (unsplit and split, 64 and 128 columns) at one token, counts between and 16,
    against the fp32 reference at each: the count and the batch strides are its only arguments."""
    pytest.importorskip("triton")
    import torch

    from pipeline.backends.measure import check_numerics
    from pipeline.kernels.torch_gemm import allocate, reference

    swapped = [c for c in tg.configs(problem, torch.cuda.get_device_properties(0).multi_processor_count)]
    swapped = [c for c in swapped if c.family == "swapped"]
    picks = {swapped[0], *[c for c in swapped if c.split_k > 1][-1:], *[c for c in swapped if c.block_c == 128][-1:]}
    errors = {}
    for m in (1, 3, 8, 13, 16):
        at = problem.with_tokens(m)
        ops = allocate(at, 1, torch.device("cuda"), seed=m)[0]
        ref = reference(at, ops)
        for config in picks:
            twin = tg.ranged_twin(config.name)
            errors[(twin.name, m)] = check_numerics(at, tr.launcher(at, twin), ops, ref)  # raises if off
    assert len(errors) == 5 * len(picks) >= 10 and max(errors.values()) > 0


def test_the_gpu_problems_cover_every_family_and_dtype():
    """What the fp32-reference test below runs: every family in bf16 and FP8, with and without bias."""
    offered = {(c.family, p.a_type, p.bias_type is not None) for p in GPU_PROBLEMS for c in tg.configs(p, 132)}
    for family in ("gemv", "literal", "skinny", "swapped", "tiled"):
        for a_type in ("bfloat16", "float8_e4m3fn"):
            assert (family, a_type, False) in offered or (family, a_type, True) in offered, (family, a_type)
    assert {bias for *_, bias in offered} == {True, False}


@pytest.mark.parametrize(
    "problem",
    [pytest.param(p, marks=pytest.mark.xdist_group(f"triton-{i}")) for i, p in enumerate(GPU_PROBLEMS)],
    ids=lambda p: f"{p.op}-{p.m}x{p.n}x{p.k}-{p.a_type}",
)  # each in a process of its own: their compiles run side by side
@pytest.mark.gpu
@pytest.mark.gpu_untimed
def test_every_offered_config_matches_the_fp32_reference(problem):
    pytest.importorskip("triton")
    import torch

    from pipeline.backends.measure import check_numerics
    from pipeline.kernels.torch_gemm import allocate, reference

    ops = allocate(problem, 1, torch.device("cuda"), seed=7)[0]
    ref = reference(problem, ops)
    offered = tg.configs(problem, torch.cuda.get_device_properties(0).multi_processor_count)
    assert offered
    found = offered[:: max(1, len(offered) // 3)]  # a spread of tiles and splits: each compiles for a second
    gemv = [c for c in offered if c.family == "gemv"]
    picks = gemv[:1] + [c for c in gemv if c.split_k > 1][-1:] + [c for c in gemv if c.block_c == 16][-1:]
    swapped = [c for c in offered if c.family == "swapped"]
    picks += swapped[:1] + [c for c in swapped if c.split_k > 1][-1:] + [c for c in swapped if c.block_c == 128][-1:]
    found += [c for c in picks if c not in found]  # the one-token kernel and the swapped tile: unsplit, split, ...
    errors = {c.name: check_numerics(problem, tr.launcher(problem, c), ops, ref) for c in found}  # raises if off
    assert max(errors.values()) > 0, "an exact match on random data means the output was not computed"
    print(f"\n{problem.op} {problem.m}x{problem.n}x{problem.k}: {len(found)} configs, worst {max(errors.values()):.2e}")


@pytest.mark.gpu
@pytest.mark.gpu_untimed
def test_a_config_that_cannot_run_fails_in_the_harness_alone():
    pytest.importorskip("triton")
    import torch

    from pipeline.backends.measure import TimingSettings, rotating_operands, screen_passes
    from pipeline.kernels.torch_gemm import torch_launcher

    problem = linear(4096, 512, 4096)
    too_big = tg.TritonConfig(256, 256, 256, num_warps=4, num_stages=6)  # far over the shared memory
    sets = rotating_operands(problem, torch.device("cuda"), TimingSettings())
    outcomes = screen_passes([torch_launcher(problem), tr.launcher(problem, too_big)], sets, 1, None)
    assert isinstance(outcomes[0], float) and outcomes[0] > 0
    assert isinstance(outcomes[1], Exception), outcomes[1]


def test_a_problem_frame_is_the_integers_its_calls_hand_the_kernels():
    tn = tr.Frame.of_problem(linear(4096, 8, 1024))  # F.linear: X[8, 1024] rows, Y = W.t() columns contiguous
    assert (tn.batch, tn.rows, tn.k, tn.cols) == (1, 8, 1024, 4096)
    assert (tn.xs, tn.ys, tn.os) == ((0, 1024, 1), (0, 1, 1024), (0, 4096, 1))
    nn = tr.Frame.of_problem(GemmProblem("gemm", "N", "N", 64, 32, 128, 80, 144, 96))  # padded lds
    assert (nn.xs, nn.ys, nn.os) == ((0, 144, 1), (0, 80, 1), (0, 96, 1))
    bmm = tr.Frame.of_problem(GemmProblem("gemm_strided_batched", "T", "N", 256, 8, 512, 512, 512, 256, batch=3))
    assert (bmm.batch, bmm.xs, bmm.ys, bmm.os) == (3, (8 * 512, 512, 1), (256 * 512, 1, 512), (8 * 256, 256, 1))


def test_a_solution_name_spells_its_config_and_a_broken_one_is_refused():
    from pipeline.stages.validate.validate import solution_config

    for config in [c for t in (1, 8, 512) for c in tg.configs(linear(4096, t, 4096), 132)]:  # all three families
        assert tg.config_from_name(config.name) == config
        assert solution_config(config.name) == config.to_json()
    with pytest.raises(ValueError, match="not a Triton solution name"):
        tg.config_from_name("triton_r16c64k256_s2")


@pytest.mark.gpu
@pytest.mark.gpu_untimed
def test_the_fast_launcher_matches_the_jit_and_a_misaligned_pointer_takes_the_jit():
    pytest.importorskip("triton")
    import torch

    torch.manual_seed(0)
    x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    runner = tr.Runner(tg.TritonConfig(16, 64, 256, split_k=2))
    outs = [torch.empty(8, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    runner.run(x, w.t(), outs[0])  # compiles, then keeps the kernels' own launcher
    assert runner._launch is not None
    runner.run(x, w.t(), outs[1])  # through that launcher
    runner(x, w.t(), outs[2])  # through Triton's JIT
    shifted = torch.empty(8 * 4096 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(8, 4096)
    shifted.copy_(x)
    assert not tr.Runner.aligned(shifted)
    runner.run(shifted, w.t(), outs[3])  # 2 bytes off: the JIT specialises a kernel that makes no such assumption
    assert all(torch.equal(outs[0], out) for out in outs[1:])  # the split-K sum is in a fixed order
    from triton import knobs

    seen = []

    def hook(*args, **kwargs) -> None:
        seen.append(1)

    knobs.runtime.launch_enter_hook.add(hook)  # a profiler's hook: the launcher declines, the JIT calls it
    try:
        runner.run(x, w.t(), outs[1])
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert seen and torch.equal(outs[1], outs[0])
    assert float((outs[0].float() - x.float() @ w.float().t()).norm() / (x.float() @ w.float().t()).norm()) < 1e-2


@pytest.mark.gpu
@pytest.mark.gpu_untimed
@pytest.mark.parametrize("batch,split,swapped", [(1, 1, 0), (1, 2, 0), (3, 1, 0), (3, 2, 0), (1, 1, 1), (3, 2, 1)])
def test_a_prepared_launcher_matches_the_jit_without_a_first_call(batch, split, swapped):
    pytest.importorskip("triton")
    import torch

    torch.manual_seed(0)
    op = "gemm_strided_batched" if batch > 1 else "gemm_and_bias"
    problem = GemmProblem(op, "T", "N", 512, 8, 4096, 4096, 4096, 512, batch=batch)
    lead = (batch,) if batch > 1 else ()
    x = torch.randn(*lead, 8, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(*lead, 512, 4096, device="cuda", dtype=torch.bfloat16) / 64
    bias = torch.randn(512, device="cuda", dtype=torch.bfloat16) if batch == 1 else None
    config = tg.TritonConfig(16, 64, 256, split_k=split, num_warps=4, family="swapped" if swapped else "")
    prepared, jit = tr.Runner(config), tr.Runner(config)
    prepared.prepare(problem, torch.cuda.current_device())
    assert prepared._launch is not None, "prepare builds the launcher before any call"
    outs = [torch.empty(*lead, 8, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    prepared.run(x, w.mT, outs[0], bias)
    jit(x, w.mT, outs[1], bias)
    assert torch.equal(outs[0], outs[1])
    want = x.float() @ w.float().mT + (0 if bias is None else bias.float())
    assert float((outs[0].float() - want).norm() / want.norm()) < 1e-2


def test_a_kernel_family_is_one_entry_of_the_registry(monkeypatch):
    """A new family (here the tiled kernel under another name, offered above 64 tokens) is its entry alone: Bench
    offers its configs, its names carry its suffix and parse back, the runner takes its kernel, and its winners
    serve the token counts its entry says."""

    def wide_configs(problem, sms):
        return [tg.TritonConfig(128, 256, 64, family="wide")]

    entry = tg.Family("gemm", "_wide", lambda problem, sms: problem.n > 64, wide_configs, (33, None))
    monkeypatch.setitem(tg.FAMILIES, "wide", entry)
    offered = [c for c in tg.configs(linear(4096, 128, 4096), sms=132) if c.family == "wide"]
    assert [c.name for c in offered] == ["triton_r128c256k64_s1_g8_w4_st3_wide"]
    assert tg.config_from_name(offered[0].name) == offered[0] and offered[0].kernel == "gemm"
    assert not [c for c in tg.configs(linear(4096, 32, 4096), sms=132) if c.family == "wide"], "32 tokens: not offered"
    assert tg.TritonConfig.from_json(offered[0].to_json()) == offered[0]
    assert tg.serves_range(offered[0].name, 33, 4096) and not tg.serves_range(offered[0].name, 32, 128)
    with pytest.raises(ValueError, match="family 'wider'"):
        tg.TritonConfig(128, 256, 64, family="wider")
    name = offered[0].name
    monkeypatch.delitem(tg.FAMILIES, "wide")
    with pytest.raises(ValueError, match="_lit, _swap, _swr or neither"):
        tg.config_from_name(name)
