"""The problem set of the multi-GPU scaling benchmark: the GEMMs of four model shapes at decode and prefill
token counts, written as the TunableOp untuned file torch records (``bench/scaling_untuned.csv``).

Every projection is ``F.linear(x[T, K], W[N, K])``: ``GemmTunableOp_BFloat16_TN, tn_N_T_K_ld_K_K_N`` (with
bias, ``GemmAndBiasTunableOp``, as Qwen's q/k/v projections record it).

    python bench/scaling_problems.py            # rewrites bench/scaling_untuned.csv
"""

from __future__ import annotations

from pathlib import Path

from pipeline.api import GemmProblem, TunableOpEntry, write_tunableop_results

OUT = Path(__file__).with_name("scaling_untuned.csv")
DECODE = (1, 2, 4, 8, 16, 32, 64, 128)
PREFILL = (512, 2048, 4096)

# model: [(name, N, K, bias)] per layer projection, then the lm_head (decode and the first prefill size only)
MODELS = {
    "llama3-8b": (
        [
            ("q", 4096, 4096, False),
            ("kv", 1024, 4096, False),
            ("o", 4096, 4096, False),
            ("gate_up", 14336, 4096, False),
            ("down", 4096, 14336, False),
        ],
        128256,
        4096,
    ),
    "llama3-70b-tp8": (
        [
            ("q", 1024, 8192, False),
            ("kv", 128, 8192, False),
            ("o", 8192, 1024, False),
            ("gate_up", 3584, 8192, False),
            ("down", 8192, 3584, False),
        ],
        16032,
        8192,
    ),
    "mixtral-8x7b": (
        [
            ("q", 4096, 4096, False),
            ("kv", 1024, 4096, False),
            ("o", 4096, 4096, False),
            ("router", 8, 4096, False),
            ("expert_w1", 14336, 4096, False),
            ("expert_w2", 4096, 14336, False),
        ],
        32000,
        4096,
    ),
    "qwen2.5-7b": (
        [
            ("q", 3584, 3584, True),
            ("kv", 512, 3584, True),
            ("o", 3584, 3584, False),
            ("gate_up", 18944, 3584, False),
            ("down", 3584, 18944, False),
        ],
        152064,
        3584,
    ),
}


def linear(n: int, t: int, k: int, bias: bool) -> GemmProblem:
    return GemmProblem("gemm_and_bias" if bias else "gemm", "T", "N", n, t, k, k, k, n)


def expert_tokens(t: int) -> int:
    """Tokens one Mixtral expert sees out of ``t`` (top-2 of 8 experts, balanced): at least one."""
    return max(1, t * 2 // 8)


def problems() -> list[GemmProblem]:
    found: dict[GemmProblem, None] = {}
    for layers, vocab, hidden in MODELS.values():
        for t in DECODE + PREFILL:
            for name, n, k, bias in layers:
                found[linear(n, expert_tokens(t) if name.startswith("expert") else t, k, bias)] = None
            if t in DECODE + PREFILL[:1]:
                found[linear(vocab, t, hidden, False)] = None
    return list(found)


def main() -> None:
    chosen = problems()
    write_tunableop_results(OUT, {}, [TunableOpEntry.from_problem(p) for p in chosen])
    print(f"{len(chosen)} problems -> {OUT}")


if __name__ == "__main__":
    main()
