"""A HuggingFace ``transformers`` model built from its config (random weights, nothing downloaded), run as
a workload: prefill a batch of prompts, then a few greedy decode steps; prints tokens/s.

    python -m pipeline.workloads.hf --arch llama [--layers 2] [--dtype bfloat16] [--batch 2] [--prompt 64]
        [--compile reduce-overhead]

``--compile MODE`` decodes as transformers documents for a compiled decode loop (its "static cache and
torch.compile" guide): a ``StaticCache``, the prompt prefilled eagerly, then one token per call of a
``torch.compile``'d step (``mode=MODE``, ``fullgraph=True``; ``reduce-overhead``: CUDA graphs). Only the decode
loop is timed, one host sync at each end, so the figure is the GPU's decode rate, not ``generate``'s per-token
host work (with which an A/B of GEMM tuning drowns in noise). The first, untimed rep compiles; its time is
printed. ``--decode generate`` times ``generate`` itself instead, compiled by transformers' ``CompileConfig``.

It is the model code of ``transformers`` itself, not ours, so its GEMMs are the ones a user's model runs:
rotary outer products, Conv1D ``addmm`` (GPT-2), mixture-of-experts routing (Mixtral), encoder-decoder
attention (T5), an encoder alone (BERT, prefill only). ``transformers`` is a test and example dependency,
not one of the pipeline's. Tune one of these with::

    luigi --module pipeline TuneWorkload --local-scheduler \\
        --workload-cmd "python3 -m pipeline.workloads.hf --arch mistral"
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from collections.abc import Callable, Sequence

NO_GPU_EXIT_CODE = 3

# Widths are those of small real models (or scaled-down real ones); layer counts stay small.
ARCHS: dict[str, dict] = {
    "llama": {
        "config": "LlamaConfig",
        "head": "AutoModelForCausalLM",
        "dtype": "bfloat16",
        "kw": {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
            "max_position_embeddings": 2048,
        },
    },
    "mistral": {
        "config": "MistralConfig",
        "head": "AutoModelForCausalLM",
        "dtype": "bfloat16",
        "kw": {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32768,
            "max_position_embeddings": 4096,
        },
    },
    "llama3-8b": {
        "config": "LlamaConfig",
        "head": "AutoModelForCausalLM",
        "dtype": "bfloat16",
        "depth": 32,  # the released model's decoder layers: what --layers 0 builds
        "kw": {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
    },
    "qwen2-7b": {
        "config": "Qwen2Config",
        "head": "AutoModelForCausalLM",
        "dtype": "bfloat16",
        "depth": 28,
        "kw": {
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "max_position_embeddings": 32768,
        },
    },
    "gpt2": {
        "config": "GPT2Config",
        "head": "AutoModelForCausalLM",
        "dtype": "float16",
        "kw": {"n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024},
    },
    "bert": {
        "config": "BertConfig",
        "head": "AutoModel",
        "dtype": "float32",
        "kw": {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "vocab_size": 30522},
    },
    "mixtral": {
        "config": "MixtralConfig",
        "head": "AutoModelForCausalLM",
        "dtype": "bfloat16",
        "kw": {
            "hidden_size": 1024,
            "intermediate_size": 3584,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 32000,
            "max_position_embeddings": 2048,
        },
    },
    "t5": {
        "config": "T5Config",
        "head": "AutoModelForSeq2SeqLM",
        "dtype": "float32",
        "kw": {
            "d_model": 512,
            "d_ff": 2048,
            "d_kv": 64,
            "num_heads": 8,
            "vocab_size": 32128,
            "decoder_start_token_id": 0,
            "pad_token_id": 0,
        },
    },
}
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers")
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def depth(arch: str, layers: int) -> int:
    """``layers``, or where it is 0 the released model's depth (its decoder layers: a run whose GPU time is the
    model's, mostly its GEMMs); ``ValueError`` for an arch without one recorded or a negative count."""
    if layers > 0:
        return layers
    full = ARCHS[arch].get("depth")
    if layers < 0 or not full:
        raise ValueError(
            f"--layers {layers}: give a positive count"
            + ("" if layers < 0 else f" ({arch} has no full depth recorded)")
        )
    return full


def build(arch: str, layers: int, dtype: str, device: str):
    """The model of ``arch`` from its config, on ``device`` in ``dtype``, in eval mode (``layers`` 0: its full
    depth, ``depth``). Its weights are made in ``dtype``: a Llama-3-8B shape built in float32 and cast peaked at
    30.9 GiB on the GPU, built in bf16 at 15.0 GiB, in the same 5-6 s (H200, docs/decisions.md)."""
    import torch
    import transformers

    spec = ARCHS[arch]
    config_class = getattr(transformers, spec["config"])
    probe = config_class()
    kw = dict(spec["kw"])
    layers = depth(arch, layers)
    kw.update({key: layers for key in _LAYER_KEYS if hasattr(probe, key)})
    config = config_class(**kw)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))  # what HF builds in where the config names no dtype
    try:
        with torch.device(device):  # random init on the GPU: a billion-parameter model builds in seconds
            model = getattr(transformers, spec["head"]).from_config(config)
    finally:
        torch.set_default_dtype(previous)
    return model.to(device=device, dtype=getattr(torch, dtype)).eval(), config


def run(
    model, config, arch: str, batch: int, prompt: int, new_tokens: int, device: str, synchronize: Callable[[], None]
) -> tuple[int, float]:
    """One prefill of ``batch`` x ``prompt`` tokens and ``new_tokens`` greedy steps; (tokens, seconds)."""
    import torch

    ids = torch.randint(1, config.vocab_size, (batch, prompt), device=device)
    mask = torch.ones_like(ids)
    synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        if ARCHS[arch]["head"] == "AutoModel":
            model(input_ids=ids, attention_mask=mask)
            tokens = batch * prompt
        else:
            model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
            tokens = batch * (prompt + new_tokens)
    synchronize()
    return tokens, time.perf_counter() - start


def decode_one_token(model, token, cache_position, cache, keyword: str = "past_key_values"):
    """One greedy decode step (the function the guide compiles): the next token of each sequence. ``keyword``:
    the name the model's forward takes its cache by (``cache_keyword``)."""
    kwargs = {keyword: cache}
    logits = model(token, cache_position=cache_position, use_cache=True, return_dict=False, **kwargs)[0]
    return logits[:, -1].argmax(-1, keepdim=True)


def cache_keyword(model) -> str:
    """``cache`` where the model's forward takes it (transformers 5.24 renamed ``past_key_values``, deprecated
    there and removed in 5.40), else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class CompiledDecoder:
    """transformers' documented compiled decoding: a ``StaticCache``, an eager prefill, a compiled step."""

    def __init__(self, model, config, batch: int, prompt: int, new_tokens: int, device: str, mode: str) -> None:
        import torch
        import transformers

        self.model, self.config, self.shape, self.device = model, config, (batch, prompt), device
        self.new_tokens, self.generated = new_tokens, None
        self.cache = transformers.StaticCache(config=config, max_cache_len=prompt + new_tokens)
        self.step = torch.compile(decode_one_token, mode=mode, fullgraph=True)
        self.keyword = cache_keyword(model)

    def run(self, synchronize: Callable[[], None]) -> tuple[int, float]:
        """Prefill a fresh batch of prompts, then decode; (decoded tokens, seconds of the decode loop)."""
        import torch

        batch, prompt = self.shape
        ids = torch.randint(1, self.config.vocab_size, (batch, prompt), device=self.device)
        with torch.inference_mode():
            self.cache.reset()
            position = torch.arange(prompt, device=self.device)
            tokens = [decode_one_token(self.model, ids, position, self.cache, self.keyword)]
            position = torch.tensor([prompt], device=self.device)
            synchronize()
            start = time.perf_counter()
            for _ in range(self.new_tokens - 1):  # clone: the token outlives the graph replay that wrote it
                tokens.append(self.step(self.model, tokens[-1], position, self.cache, self.keyword).clone())
                position += 1
            synchronize()
            seconds = time.perf_counter() - start
        self.generated = torch.cat([ids, *tokens], dim=1)  # what generate() would return
        return batch * (self.new_tokens - 1), seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.workloads.hf",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--arch", choices=sorted(ARCHS), default="llama")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], help="default: the arch's")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument(
        "--reps", type=int, default=2, help="timed generations after one untimed warm-up; the median rate is printed"
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--compile",
        choices=COMPILE_MODES,
        default="none",
        help="decode with a static cache and the forward compiled in this torch.compile mode",
    )
    parser.add_argument(
        "--decode",
        choices=("loop", "generate"),
        default="loop",
        help="with --compile: time the compiled decode loop alone (default) or generate()",
    )
    args = parser.parse_args(argv)
    if args.compile != "none" and ARCHS[args.arch]["head"] != "AutoModelForCausalLM":
        print(f"--compile decodes a causal LM; {args.arch} is not one", file=sys.stderr)
        return 2
    try:
        import torch
        import transformers
    except ImportError as err:
        print(f"this workload needs torch and transformers ({err}); pip install transformers", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("this workload needs a CUDA or ROCm GPU: torch.cuda.is_available() is False", file=sys.stderr)
        return NO_GPU_EXIT_CODE
    torch.manual_seed(0)
    model, config = build(args.arch, args.layers, args.dtype or ARCHS[args.arch]["dtype"], args.device)

    def synchronize() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize()

    loop = args.compile != "none" and args.decode == "loop"
    if loop:
        if args.new_tokens < 2:
            print("--compile times the decode loop: --new-tokens must be 2 or more", file=sys.stderr)
            return 2
        decoder = CompiledDecoder(model, config, args.batch, args.prompt, args.new_tokens, args.device, args.compile)

        def once() -> tuple[int, float]:
            return decoder.run(synchronize)
    else:
        if args.compile != "none":  # generate() compiles the decode step itself (transformers' CompileConfig)
            model.generation_config.cache_implementation = "static"
            model.generation_config.compile_config = transformers.CompileConfig(mode=args.compile, fullgraph=True)

        def once() -> tuple[int, float]:
            return run(model, config, args.arch, args.batch, args.prompt, args.new_tokens, args.device, synchronize)

    start = time.perf_counter()
    once()
    if args.compile != "none":
        print(
            f"compile ({args.compile}) and first {'decode' if loop else 'generation'}: "
            f"{time.perf_counter() - start:.1f} s"
        )
    rates = [n / s for n, s in (once() for _ in range(args.reps))]
    print(
        f"{args.arch}: {args.layers} layers, batch {args.batch}, prompt {args.prompt}, {args.new_tokens} new tokens"
        + (f", compiled ({args.compile}, static cache)" if args.compile != "none" else "")
    )
    spread = (max(rates) - min(rates)) / statistics.median(rates)
    what = "decode loops" if loop else "generations"
    print(f"throughput: {statistics.median(rates):.1f} tokens/s (median of {args.reps} {what}, spread {spread:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
