"""Embedded default workload: a Llama-style decoder in plain torch, random weights, no downloads.

Run ``python -m pipeline.workloads.llama`` on a GPU. It prefills a few (batch, prompt length) pairs, then
runs a short greedy decode for each, and prints tokens/s: per pair, overall (``throughput:``), and last the
decode throughput, which an end-to-end A/B compares (``--repeat N`` times each pair, medians).

Decode runs as serving engines run it with ``--decode-mode graph``: one step captured as a CUDA graph over
static buffers (a fixed-size KV cache read under a position mask), replayed per token. ``--decode-mode
eager`` (the default, which the pipeline collects and weights calls with: every step's calls go through
the host) runs each step as Python calls, the cache sliced to the current length. Both run the same GEMMs.

Its GEMMs, in TunableOp's BLAS frame for
``T`` tokens (batch x sequence): fused qkv ``tn_{(heads + 2 kv_heads) head_dim}_T_{hidden}``, o
``tn_{hidden}_T_{hidden}``, gate_up ``tn_{2 intermediate}_T_{hidden}``, down ``tn_{hidden}_T_{intermediate}``
and lm_head ``tn_{vocab}_{batch}_{hidden}`` (logits of the last position only).

``--fp8`` runs the decoder's linear layers (qkv, o, gate_up, down) as torchao's float8 inference does: each
weight quantized once to e4m3 with one scale per tensor, each activation scaled per tensor at every call
(dynamic: its amax over the e4m3 maximum, on the GPU, so graph decode captures it), the product through
``torch._scaled_mm`` into the model's dtype. The lm_head stays in the model's dtype. Needs FP8 tensor cores
(sm 8.9+, MI300+; ROCm's MI300 takes the fnuz variant).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

NO_GPU_EXIT_CODE = 3


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    intermediate: int = 14336
    vocab: int = 128256
    layers: int = 2
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def qkv_width(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, rotate-half convention; ``cos``/``sin`` are ``[seq, head_dim]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.hidden, cfg.qkv_width, bias=False)
        self.o = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False)

    def _heads(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, v as ``[batch, heads, seq, head_dim]``, q and k rotated."""
        cfg, (batch, seq, _) = self.cfg, x.shape
        q, k, v = self.qkv(x).split(
            [cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim], dim=-1
        )
        q = rotate(q.view(batch, seq, cfg.heads, cfg.head_dim).transpose(1, 2), cos, sin)
        k = rotate(k.view(batch, seq, cfg.kv_heads, cfg.head_dim).transpose(1, 2), cos, sin)
        return q, k, v.view(batch, seq, cfg.kv_heads, cfg.head_dim).transpose(1, 2)

    def _project(self, out: torch.Tensor) -> torch.Tensor:
        batch, _, seq, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(batch, seq, self.cfg.heads * self.cfg.head_dim))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: tuple[torch.Tensor, torch.Tensor],
        start: int,
    ) -> torch.Tensor:
        (batch, seq, _), (q, k, v) = x.shape, self._heads(x, cos, sin)
        cache_k, cache_v = cache
        cache_k[:batch, :, start : start + seq] = k
        cache_v[:batch, :, start : start + seq] = v
        keys, values = cache_k[:batch, :, : start + seq], cache_v[:batch, :, : start + seq]
        return self._project(F.scaled_dot_product_attention(q, keys, values, is_causal=seq > 1, enable_gqa=True))

    def decode(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: tuple[torch.Tensor, torch.Tensor],
        position: torch.Tensor,
    ) -> torch.Tensor:
        """One token per sequence at ``position`` (a device tensor): static shapes, so it can be captured."""
        batch, (q, k, v) = x.shape[0], self._heads(x, cos, sin)
        cache_k, cache_v = cache[0][:batch], cache[1][:batch]
        cache_k.index_copy_(2, position, k)
        cache_v.index_copy_(2, position, v)
        visible = (torch.arange(cache_k.shape[2], device=x.device) <= position)[None, :]  # [1 query, keys]
        groups = self.cfg.heads // self.cfg.kv_heads
        return self._project(
            F.scaled_dot_product_attention(
                q, cache_k.repeat_interleave(groups, 1), cache_v.repeat_interleave(groups, 1), attn_mask=visible
            )
        )


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.hidden, 2 * cfg.intermediate, bias=False)
        self.down = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


def fp8_dtype() -> torch.dtype:
    """The e4m3 flavour this GPU's tensor cores take: fnuz on MI300 (gfx94x), OCP elsewhere."""
    if torch.version.hip and "gfx94" in torch.cuda.get_device_properties(0).gcnArchName:
        return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def quantize(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` in FP8 with one fp32 scale for the whole tensor (its amax maps to the type's largest value)."""
    top = torch.finfo(dtype).max
    scale = x.abs().amax().float().clamp_min(1e-12) / top
    return (x.float() / scale).clamp(-top, top).to(dtype), scale


class FP8Linear(nn.Module):
    """A linear layer in FP8: the weight quantized per tensor once, the input per tensor per call, a bias (if the
    layer has one, as Qwen2's q/k/v do) added in the product's epilogue."""

    def __init__(self, linear: nn.Linear, dtype: torch.dtype) -> None:
        super().__init__()
        weight, scale = quantize(linear.weight.detach(), dtype)
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())
        self.out_dtype, self.fp8 = linear.weight.dtype, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        q, scale = quantize(flat, self.fp8)
        out = torch._scaled_mm(q, self.weight.t(), scale, self.weight_scale, bias=self.bias, out_dtype=self.out_dtype)
        return out.reshape(*x.shape[:-1], out.shape[-1])


def to_fp8(model: nn.Module) -> nn.Module:
    """``model`` with the linear layers of its blocks in FP8 (``FP8Linear``); the lm_head stays as it is."""
    dtype = fp8_dtype()
    for block in model.blocks:
        for parent, name in ((block.attn, "qkv"), (block.attn, "o"), (block.mlp, "gate_up"), (block.mlp, "down")):
            setattr(parent, name, FP8Linear(getattr(parent, name), dtype))
    return model


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache, start):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache, start)
        return x + self.mlp(self.mlp_norm(x))

    def decode(self, x, cos, sin, cache, position):
        x = x + self.attn.decode(self.attn_norm(x), cos, sin, cache, position)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def new_cache(self, batch: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cfg, ref = self.cfg, self.lm_head.weight
        shape = (batch, cfg.kv_heads, length, cfg.head_dim)
        return [(ref.new_zeros(shape), ref.new_zeros(shape)) for _ in range(cfg.layers)]

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.outer(positions.float(), self.inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        dtype = self.lm_head.weight.dtype
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, tokens: torch.Tensor, cache: list, start: int) -> torch.Tensor:
        """Logits of the last position for ``tokens[batch, seq]`` placed at ``start`` in the cache."""
        cos, sin = self._rotary(torch.arange(start, start + tokens.shape[1], device=tokens.device))
        x = self.embed(tokens)
        for block, layer_cache in zip(self.blocks, cache, strict=True):
            x = block(x, cos, sin, layer_cache, start)
        return self.lm_head(self.norm(x[:, -1, :]).contiguous())

    def decode(self, tokens: torch.Tensor, cache: list, position: torch.Tensor) -> torch.Tensor:
        """Logits for ``tokens[batch, 1]`` at ``position`` (a one-element device tensor): capturable."""
        cos, sin = self._rotary(position)
        x = self.embed(tokens)
        for block, layer_cache in zip(self.blocks, cache, strict=True):
            x = block.decode(x, cos, sin, layer_cache, position)
        return self.lm_head(self.norm(x[:, -1, :]).contiguous())


class GraphDecoder:
    """One greedy decode step captured as a CUDA graph over static token/position buffers; ``step(token,
    position)`` replays it. Warm-up runs write the cache at the first decode position, which the first
    replay writes again with the same values."""

    def __init__(self, model: Llama, cache: list, token: torch.Tensor, position: int) -> None:
        self.tokens = token.clone()
        self.position = torch.full((1,), position, dtype=torch.long, device=token.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model.decode(self.tokens, cache, self.position)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.next_token = model.decode(self.tokens, cache, self.position).argmax(-1, keepdim=True)

    def step(self, token: torch.Tensor, position: int) -> torch.Tensor:
        self.tokens.copy_(token)
        self.position.fill_(position)
        self.graph.replay()
        return self.next_token.clone()


def generate(
    model: Llama, batch: int, prompt: int, steps: int, generator: torch.Generator, mode: str = "eager"
) -> dict:
    """Greedy generation; returns the prefill and decode times in seconds and the tokens made. In ``graph``
    mode the decode step is captured after the prefill, outside the timed span (engines capture at start)."""
    device = model.lm_head.weight.device
    tokens = torch.randint(0, model.cfg.vocab, (batch, prompt), device=device, generator=generator)
    cache = model.new_cache(batch, prompt + steps)
    synchronize(device)
    t0 = time.perf_counter()
    next_token = model(tokens, cache, 0).argmax(-1, keepdim=True)
    synchronize(device)
    t1 = time.perf_counter()
    decoder = GraphDecoder(model, cache, next_token, prompt) if mode == "graph" and steps > 1 else None
    synchronize(device)
    t_capture = time.perf_counter()
    out = [next_token]
    for step in range(steps - 1):
        if decoder is not None:
            next_token = decoder.step(next_token, prompt + step)
        else:
            next_token = model(next_token, cache, prompt + step).argmax(-1, keepdim=True)
        out.append(next_token)
    synchronize(device)
    t2 = time.perf_counter()
    return {
        "prefill_s": t1 - t0,
        "decode_s": t2 - t_capture,
        "capture_s": t_capture - t1,
        "tokens": torch.cat(out, dim=1),
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    d = LlamaConfig()
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.workloads.llama",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name in ("hidden", "heads", "kv_heads", "intermediate", "vocab", "layers"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompt-lengths", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--decode-steps", type=int, default=16)
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    parser.add_argument("--device", default="cuda", help="cuda (ROCm GPUs are 'cuda' too) or cpu for a smoke run")
    parser.add_argument(
        "--decode-mode",
        choices=["eager", "graph"],
        default="eager",
        help="eager: Python calls per step; graph: each step replays a captured CUDA graph",
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed generations of every (batch, prompt) pair before the timed ones"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="timed generations per (batch, prompt) pair; the medians are reported"
    )
    parser.add_argument(
        "--fp8",
        action="store_true",
        help="the decoder's linear layers in FP8 through torch._scaled_mm (tensorwise scales, "
        "dynamic for activations), as torchao's float8 inference",
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            "the embedded workload needs a CUDA or ROCm GPU, and torch.cuda.is_available() is False "
            f"(torch {torch.__version__})",
            file=sys.stderr,
        )
        return NO_GPU_EXIT_CODE
    cfg = LlamaConfig(args.hidden, args.heads, args.kv_heads, args.intermediate, args.vocab, args.layers)
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads:
        print(
            f"hidden {cfg.hidden} must split into {cfg.heads} heads, and heads into {cfg.kv_heads} kv heads",
            file=sys.stderr,
        )
        return 2
    mode = args.decode_mode
    if mode == "graph" and device.type != "cuda":
        print("--decode-mode graph needs a CUDA or ROCm GPU (CUDA graphs)", file=sys.stderr)
        return 2
    if args.fp8 and (device.type != "cuda" or (torch.version.cuda and torch.cuda.get_device_capability() < (8, 9))):
        print("--fp8 needs a GPU with FP8 tensor cores (NVIDIA sm 8.9 or newer, AMD MI300 or newer)", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = Llama(cfg).to(getattr(torch, args.dtype)).eval()
        if args.fp8:
            model = to_fp8(model)
    generator = torch.Generator(device).manual_seed(args.seed)
    total_tokens = total_s = decoded_tokens = decode_s = 0.0
    with torch.inference_mode():
        for _ in range(args.warmup):  # every shape once: first calls (library heuristics, kernel loading) untimed
            for batch in args.batch_sizes:
                for prompt in args.prompt_lengths:
                    generate(model, batch, prompt, args.decode_steps, generator, mode)
        for batch in args.batch_sizes:
            for prompt in args.prompt_lengths:
                runs = [generate(model, batch, prompt, args.decode_steps, generator, mode) for _ in range(args.repeat)]
                prefill = statistics.median(r["prefill_s"] for r in runs)
                decode = statistics.median(r["decode_s"] for r in runs)
                decoded = batch * (args.decode_steps - 1)
                print(
                    f"batch={batch} prompt={prompt}: prefill {batch * prompt / prefill:.1f} tokens/s, "
                    f"decode ({mode}) {decoded / max(decode, 1e-9):.1f} tokens/s"
                )
                total_tokens += batch * (prompt + args.decode_steps - 1)
                total_s += prefill + decode
                decoded_tokens += decoded
                decode_s += decode
    print(f"throughput: {total_tokens / total_s:.1f} tokens/s")
    print(f"decode throughput: {decoded_tokens / max(decode_s, 1e-9):.1f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
