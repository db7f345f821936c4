"""A HuggingFace decoder built from its config (random weights, nothing downloaded), served as an inference
server schedules it, so that its GEMMs meet the token counts a server runs:

    python -m pipeline.workloads.serve --arch llama3-8b [--layers 4] [--seed 0] [--eager] [--compile] [--fp8]

* **Requests** drawn from ``--seed``: ``--requests`` of them, prompt lengths uniform in ``--prompt-min..max``,
  output lengths in ``--output-min..max``, all waiting at the start (an offline batch, as a benchmark serves).
* **Continuous batching**: up to ``--max-seqs`` requests run at once, each in a slot of a preallocated KV cache;
  a finished request frees its slot and the next waiting one takes it at the next step.
* **Chunked prefill**: each step prefills at most ``--max-batched-tokens`` prompt tokens, taken first come first
  served and split across steps where a prompt is longer; those tokens run through the linear layers as one
  flattened batch (M = the step's prompt tokens, any count up to the budget), and so does attention: one masked
  call a layer in which each token sees its own request's cache up to its position (as a server's
  variable-length attention kernel takes the whole batch at once).
* **Decode**: every request past its prompt decodes one token a step; the batch is padded up to the next of vLLM's
  CUDA-graph capture sizes (1, 2, 4, 8, 16, ..., ``vllm/config/compilation.py``) and, unless ``--eager``, runs as
  the CUDA graph captured for that size at start-up (static token, slot and position buffers; the padding rows
  write a scratch slot).
* ``--compile``: the forward passes compiled (``torch.compile``, Inductor's default mode), as vLLM serves by
  default: a layer's norms, rotary and activations fuse around its GEMMs, which stay library calls, so a step is
  mostly its GEMMs. One decode layer is compiled, captured per size, and serves every layer; one prefill layer
  is compiled for any token count.

The model's own modules run every GEMM (``q/k/v/o_proj``, the MLP, ``lm_head`` on each request's last
position); attention is the server's own (``scaled_dot_product_attention`` over the slot's cache), as servers
bring their own attention. Greedy sampling, one host sync a step (a server reads the sampled tokens each step).
Prints, per timed pass and as medians over ``--repeat`` passes after an untimed warm-up pass of the same
schedule: steps, p50/p99 step latency, the saturated output rate (the steps while requests waited for a slot)
and last the pass's output rate, ``throughput: X tokens/s`` (every output token over the wall time of every step:
the ramp at the start and the drain at the end included, as a benchmark of an offline batch counts them; the
model's build and the graphs' capture are outside it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .hf import ARCHS, build, depth

NO_GPU_EXIT_CODE = 3
BAD_OUTPUT_EXIT_CODE = 12  # the project's bad-input code (pipeline/errors.py INPUT; workloads import nothing of it)
SERVED_ARCHS = ("llama", "mistral", "llama3-8b", "qwen2-7b")  # decoders of the Llama layout (q/k/v/o, gate/up/down)
CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))  # vLLM's decode capture sizes up to 512
PROJECTIONS = (("q_proj", "k_proj", "v_proj", "o_proj"), ("gate_proj", "up_proj", "down_proj"))


def padded_size(batch: int) -> int:
    """The capture size a decode batch is padded up to."""
    return next(size for size in CAPTURE_SIZES if size >= batch)


@dataclass
class Request:
    ids: list[int]  # the prompt's tokens
    output: int  # tokens to generate
    slot: int = -1
    prefilled: int = 0  # prompt tokens in the cache
    generated: list[int] = field(default_factory=list)

    @property
    def prompt(self) -> int:
        return len(self.ids)

    @property
    def done(self) -> bool:
        return len(self.generated) >= self.output


def draw_requests(seed: int, count: int, prompt: tuple[int, int], output: tuple[int, int], vocab: int) -> list[Request]:
    """The request mix of ``seed``: prompt and output lengths uniform in their ranges, prompt tokens uniform."""
    rng = random.Random(seed)
    return [
        Request([rng.randrange(1, vocab) for _ in range(rng.randint(*prompt))], rng.randint(*output))
        for _ in range(count)
    ]


@dataclass(frozen=True)
class Step:
    """What one step runs: prefill chunks (request, start, length) and the requests that decode."""

    chunks: tuple[tuple[Request, int, int], ...]
    decodes: tuple[Request, ...]

    @property
    def prefill_tokens(self) -> int:
        return sum(length for _, _, length in self.chunks)


def schedule(running: list[Request], budget: int) -> Step:
    """The next step of ``running`` (in arrival order): every request past its prompt decodes; prompt tokens up to
    ``budget`` are prefilled, first come first served."""
    decodes = tuple(r for r in running if r.prefilled == r.prompt and not r.done)
    chunks, left = [], budget
    for request in running:
        if request.prefilled < request.prompt and left > 0:
            length = min(left, request.prompt - request.prefilled)
            chunks.append((request, request.prefilled, length))
            left -= length
    return Step(tuple(chunks), decodes)


class Engine:
    """The slots' KV cache and the forward passes of one model: a flattened prefill and a padded decode."""

    def __init__(self, model, config, max_seqs: int, max_len: int, compiled: bool = False) -> None:
        import torch

        self.torch, self.model, self.config = torch, model, config
        self.device = model.lm_head.weight.device
        self.layers = model.model.layers
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        shape = (max_seqs + 1, self.kv_heads, max_len, self.head_dim)  # + the padding rows' slot
        dtype = model.lm_head.weight.dtype
        # a tensor per layer: the compiled layer step takes its layer's cache whole, so one compile serves all
        self.keys = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in self.layers]
        self.scratch, self.max_len = max_seqs, max_len
        self.graphs: dict[int, tuple] = {}  # capture size -> (graph, its input buffers, its output): ``capture``
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        self.rotate = apply_rotary_pos_emb
        # the forward passes as vLLM runs them by default: Inductor fuses a layer's elementwise work (norms,
        # rotary, activations, cache writes) around its GEMMs, which stay library calls, and ``capture`` records
        # the compiled decode step. One layer is compiled and serves every layer (the layers differ only in their
        # weights and cache, both inputs), so a 32-layer model compiles as fast as a one-layer one. A prefill
        # step's token count is new at almost every step: its layer compiles for any count at once (``dynamic``)
        self.decode_layer, self.prefill_layer = self._decode_layer, self._prefill_layer
        if compiled:
            self.decode_layer = torch.compile(self._decode_layer)
            self.prefill_layer = torch.compile(self._prefill_layer, dynamic=True)

    # -- the layers ------------------------------------------------------------------------------------------
    def _rotation(self, x, positions):
        """The rotary embedding's cos and sin of ``positions``, once a forward pass (as HF's model computes them)."""
        return self.model.model.rotary_emb(x, positions[None])

    def _qkv(self, layer, x, rotation):
        """q [1, H, T, d], k and v [1, KV, T, d] of the flattened tokens ``x`` [T, hidden], rotated."""
        attn, tokens = layer.self_attn, x.shape[0]
        q = attn.q_proj(x).view(1, tokens, self.heads, self.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(1, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(1, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rotate(q, k, *rotation)
        return q, k, v

    def _block(self, layer, x, rotation, attend):
        q, k, v = self._qkv(layer, layer.input_layernorm(x), rotation)
        out = attend(q, k, v)  # [T, H * d]
        x = x + layer.self_attn.o_proj(out)
        return x + layer.mlp(layer.post_attention_layernorm(x))

    @staticmethod
    def _store(keys, values, slots, positions, k, v) -> None:
        """Each token's k and v ([1, KV, T, d]) written into its layer's cache at its slot and position."""
        keys[slots, :, positions] = k[0].transpose(0, 1)
        values[slots, :, positions] = v[0].transpose(0, 1)

    def _logits_argmax(self, x):
        return self.model.lm_head(self.model.model.norm(x)).argmax(-1)

    # -- prefill -----------------------------------------------------------------------------------------------
    def prefill(self, chunks: Sequence[tuple[Request, int, int]]) -> dict[int, int]:
        """Run the chunks as one flattened batch; the first token of each request whose prompt it completes.
        Attention too is one call a layer, as a server's variable-length kernel: each token attends its own
        request's cache up to its position (a mask over the chunks' contexts side by side)."""
        torch = self.torch
        tokens: tuple[list[int], ...] = ([], [], [], [])  # per token: its id, slot, position and chunk
        reads: tuple[list[int], ...] = ([], [], [])  # per cache entry attended: its slot, position and chunk
        for owner, (request, start, length) in enumerate(chunks):
            end = start + length
            token_values = (request.ids[start:end], [request.slot] * length, range(start, end), [owner] * length)
            read_values = ([request.slot] * end, range(end), [owner] * end)  # its cache from 0 to the chunk's end
            for column, values in zip((*tokens, *reads), (*token_values, *read_values), strict=True):
                column.extend(values)
        ids, slots, positions, owners = (torch.tensor(v, device=self.device) for v in tokens)
        read_slots, read_positions, read_owners = (torch.tensor(v, device=self.device) for v in reads)
        mask = (owners[:, None] == read_owners[None, :]) & (read_positions[None, :] <= positions[:, None])

        x = self.model.model.embed_tokens(ids)
        rotation = self._rotation(x, positions)
        attended = (read_slots, read_positions, mask)
        for layer, keys, values in zip(self.layers, self.keys, self.values, strict=True):
            x = self.prefill_layer(layer, x, rotation, keys, values, slots, positions, *attended)
        ends = itertools.accumulate(n for _, _, n in chunks)  # each chunk's last token + 1 in the flattened batch
        finishing = [(r, at - 1) for (r, start, n), at in zip(chunks, ends, strict=True) if start + n == r.prompt]
        if not finishing:
            return {}
        last = torch.tensor([at for _, at in finishing], device=self.device)
        first = self._logits_argmax(x[last]).tolist()
        return {id(r): token for (r, _), token in zip(finishing, first, strict=True)}

    def _prefill_layer(self, layer, x, rotation, keys, values, slots, positions, read_slots, read_positions, mask):
        """One layer of a prefill step: each token's k and v written at its slot and position, then attention of
        every token over the cache entries read (``read_slots``, ``read_positions``), as ``mask`` allows."""

        def attend(q, k, v):
            self._store(keys, values, slots, positions, k, v)
            out = self.torch.nn.functional.scaled_dot_product_attention(
                q,
                keys[read_slots, :, read_positions].transpose(0, 1)[None],
                values[read_slots, :, read_positions].transpose(0, 1)[None],
                attn_mask=mask,
                enable_gqa=True,
            )
            return out[0].transpose(0, 1).reshape(x.shape[0], -1)

        return self._block(layer, x, rotation, attend)

    # -- decode ------------------------------------------------------------------------------------------------
    def _decode_layer(self, layer, x, rotation, keys, values, slots, positions, mask):
        """One layer of a decode step: each row's k and v written at its slot and position, attention over the
        slot's cache up to it (``mask``)."""

        def attend(q, k, v):
            self._store(keys, values, slots, positions, k, v)
            out = self.torch.nn.functional.scaled_dot_product_attention(
                q[0].transpose(0, 1)[:, :, None], keys[slots], values[slots], attn_mask=mask, enable_gqa=True
            )
            return out[:, :, 0].reshape(x.shape[0], -1)

        return self._block(layer, x, rotation, attend)

    def _decode(self, tokens, slots, positions):
        """One decode step of the padded batch: the next token of each row."""
        rows = self.torch.arange(self.max_len, device=self.device)
        mask = (rows[None, :] <= positions[:, None])[:, None, None, :]
        x = self.model.model.embed_tokens(tokens)
        rotation = self._rotation(x, positions)
        for layer, keys, values in zip(self.layers, self.keys, self.values, strict=True):
            x = self.decode_layer(layer, x, rotation, keys, values, slots, positions, mask)
        return self._logits_argmax(x)

    def capture(self, sizes: Sequence[int]) -> None:
        """A CUDA graph of the decode step for each of ``sizes``, over static buffers (engines capture at start)."""
        torch = self.torch
        for size in sizes:
            buffers = (
                torch.ones(size, dtype=torch.long, device=self.device),
                torch.full((size,), self.scratch, dtype=torch.long, device=self.device),
                torch.zeros(size, dtype=torch.long, device=self.device),
            )
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._decode(*buffers)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self._decode(*buffers)
            self.graphs[size] = (graph, buffers, out)

    def decode(self, requests: Sequence[Request]) -> list[int]:
        """The next token of each request, its batch padded to a capture size (the padding rows: scratch slot)."""
        torch = self.torch
        size = padded_size(len(requests))
        pad = size - len(requests)
        tokens = [r.generated[-1] for r in requests] + [1] * pad
        slots = [r.slot for r in requests] + [self.scratch] * pad
        positions = [r.prompt + len(r.generated) - 1 for r in requests] + [0] * pad
        values = [torch.tensor(v, dtype=torch.long, device=self.device) for v in (tokens, slots, positions)]
        if size in self.graphs:
            graph, buffers, out = self.graphs[size]
            for buffer, value in zip(buffers, values, strict=True):
                buffer.copy_(value)
            graph.replay()
        else:
            out = self._decode(*values)
        return out[: len(requests)].tolist()


def serve(engine: Engine, requests: list[Request], max_seqs: int, budget: int, sync) -> dict:
    """Serve every request; per step its wall time, the tokens it made, and whether it ran saturated (every slot
    busy and requests waiting)."""
    waiting, running, free = list(requests), [], list(range(max_seqs))
    steps = []
    while waiting or running:
        while waiting and free:
            request = waiting.pop(0)
            request.slot = free.pop(0)
            running.append(request)
        step = schedule(running, budget)
        saturated = len(running) == max_seqs and bool(waiting)
        start = time.perf_counter()
        first = engine.prefill(step.chunks) if step.chunks else {}
        for request, _, length in step.chunks:
            request.prefilled += length
            if id(request) in first:
                request.generated.append(first[id(request)])
        if step.decodes:
            for request, token in zip(step.decodes, engine.decode(step.decodes), strict=True):
                request.generated.append(token)
        sync()  # the host reads the sampled tokens: a step ends here
        made = len(first) + len(step.decodes)
        seconds = time.perf_counter() - start
        steps.append(
            {
                "s": seconds,
                "tokens": made,
                "saturated": saturated,
                "decode_only": not step.chunks,
                "prefill_tokens": step.prefill_tokens,
                "decodes": len(step.decodes),
            }
        )
        for request in [r for r in running if r.done]:
            running.remove(request)
            free.append(request.slot)
    return {"steps": steps}


def summary(steps: list[dict]) -> dict:
    """Steps, output tokens, p50/p99 step latency (ms), the output rate of the whole pass, of its saturated
    steps and of its decode-only steps (no prefill chunk: in graph mode a graph replay each, so the GEMMs' share
    of it is the largest and the host's eager prefill does not set its pace); 0 where no step was such."""
    latencies = sorted(step["s"] for step in steps)
    saturated = [step for step in steps if step["saturated"]]
    decode_only = [step for step in steps if step.get("decode_only")]

    def rate(part: list[dict]) -> float:
        seconds = sum(step["s"] for step in part)
        return sum(step["tokens"] for step in part) / seconds if seconds else 0.0

    return {
        "steps": len(steps),
        "tokens": sum(step["tokens"] for step in steps),
        "p50_ms": 1e3 * latencies[len(latencies) // 2],
        "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "tokens_per_s": rate(steps),
        "saturated_tokens_per_s": rate(saturated),
        "saturated_steps": len(saturated),
        "decode_tokens_per_s": rate(decode_only),
        "decode_steps": len(decode_only),
    }


def to_fp8(model) -> None:
    """The decoder layers' projections (q/k/v/o, gate/up/down) in FP8 through ``torch._scaled_mm``, tensorwise
    scales, as torchao's float8 inference (``llama.FP8Linear``); the lm_head stays as it is."""
    from .llama import FP8Linear, fp8_dtype

    dtype = fp8_dtype()
    for layer in model.model.layers:
        for parent, names in ((layer.self_attn, PROJECTIONS[0]), (layer.mlp, PROJECTIONS[1])):
            for name in names:
                setattr(parent, name, FP8Linear(getattr(parent, name), dtype))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.workloads.serve",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--arch", choices=SERVED_ARCHS, default="llama")
    parser.add_argument(
        "--layers", type=int, default=2, help="decoder layers; 0: the released model's (llama3-8b, qwen2-7b)"
    )
    parser.add_argument("--dtype", choices=["bfloat16", "float16"], help="default: the arch's")
    parser.add_argument("--seed", type=int, default=0, help="the request mix")
    parser.add_argument("--requests", type=int, default=128, help="default: four per slot, so most steps saturate")
    parser.add_argument("--prompt-min", type=int, default=16)
    parser.add_argument("--prompt-max", type=int, default=512)
    parser.add_argument("--output-min", type=int, default=16)
    parser.add_argument("--output-max", type=int, default=128)
    parser.add_argument("--max-seqs", type=int, default=32, help="requests running at once (slots)")
    parser.add_argument("--max-batched-tokens", type=int, default=512, help="prompt tokens prefilled a step")
    parser.add_argument("--eager", action="store_true", help="decode without CUDA graphs")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="compile the decode and prefill layers with torch.compile (Inductor's default mode: the GEMMs stay "
        "library calls), the decode step before its graphs are captured, as vLLM serves by default",
    )
    parser.add_argument(
        "--fp8",
        action="store_true",
        help="the decoder layers' projections in FP8 through torch._scaled_mm (tensorwise scales), as torchao's "
        "float8 inference; needs FP8 tensor cores (NVIDIA sm 8.9+, AMD MI300+)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="timed passes (after one untimed); medians printed")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (implies --eager)")
    parser.add_argument(
        "--steps-out",
        help="write every timed pass's steps here as JSON (seconds, tokens made, prefill tokens, decode batch), "
        "with the CUDA caching allocator's counts at the end (its retries and device allocations); a new file: "
        "a path that is there is refused (exit 12)",
    )
    args = parser.parse_args(argv)
    bad = [
        name
        for name in ("requests", "prompt_min", "output_min", "max_seqs", "max_batched_tokens", "repeat")
        if getattr(args, name) < 1
    ]
    try:
        args.layers = depth(args.arch, args.layers)
    except ValueError as err:
        bad.append(str(err))
    if args.prompt_max < args.prompt_min or args.output_max < args.output_min:
        bad.append("prompt-max/output-max below its min")
    if args.max_seqs > CAPTURE_SIZES[-1]:
        bad.append(f"max-seqs above {CAPTURE_SIZES[-1]}")
    if bad:
        parser.error("not a positive count, or out of range: " + ", ".join(b.replace("_", "-") for b in bad))
    return args


def output_refused(path: Path) -> str | None:
    """Why the steps file cannot be written at ``path`` (None: it can): it replaces nothing that is there, a
    directory or a file, and goes into a directory that exists."""
    if path.exists() or path.is_symlink():
        return "is already there (a directory or a file this run did not write): name a new file"
    if not path.parent.is_dir():
        return f"its directory {path.parent} does not exist"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    refused = args.steps_out and output_refused(Path(args.steps_out))
    if refused:
        print(f"--steps-out {args.steps_out}: {refused}", file=sys.stderr)
        return BAD_OUTPUT_EXIT_CODE
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"the serving workload needs a GPU, and torch.cuda.is_available() is False (torch {torch.__version__})",
            file=sys.stderr,
        )
        return NO_GPU_EXIT_CODE
    torch.manual_seed(args.seed)
    model, config = build(args.arch, args.layers, args.dtype or ARCHS[args.arch]["dtype"], args.device)
    if args.fp8:
        to_fp8(model)
    graphs = args.device == "cuda" and not args.eager
    max_len = args.prompt_max + args.output_max
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    passes, timed = [], []
    with torch.inference_mode():
        engine = Engine(model, config, args.max_seqs, max_len, args.compile)
        if graphs:
            engine.capture([size for size in CAPTURE_SIZES if size <= padded_size(args.max_seqs)])
        for index in range(1 + args.repeat):  # the first pass warms up (first calls, library heuristics)
            prompt, output = (args.prompt_min, args.prompt_max), (args.output_min, args.output_max)
            requests = draw_requests(args.seed, args.requests, prompt, output, config.vocab_size)
            steps = serve(engine, requests, args.max_seqs, args.max_batched_tokens, sync)["steps"]
            result = summary(steps)
            if index:
                passes.append(result)
                timed.append(steps)
                print(
                    f"pass {index}: {result['steps']} steps, {result['tokens']} tokens, step p50 "
                    f"{result['p50_ms']:.2f} ms p99 {result['p99_ms']:.2f} ms, {result['tokens_per_s']:.1f} tokens/s"
                )
    if args.steps_out:
        allocator = torch.cuda.memory_stats() if args.device == "cuda" else {}
        counts = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams")
        record = {"passes": timed, "allocator": {k: allocator.get(k) for k in counts}}
        partial_out = Path(f"{args.steps_out}.partial")  # a standalone program: written aside, then renamed
        partial_out.write_text(json.dumps(record, indent=1) + "\n")
        partial_out.replace(args.steps_out)
    keys = ("p50_ms", "p99_ms", "tokens_per_s", "saturated_tokens_per_s", "decode_tokens_per_s")
    median = {key: statistics.median(p[key] for p in passes) for key in keys}
    mode = ("eager" if not graphs else "CUDA graphs") + (", compiled" if args.compile else "")
    print(
        f"serve {args.arch} ({args.layers} layers, seed {args.seed}, {args.requests} requests, decode {mode}): "
        f"step p50 {median['p50_ms']:.2f} ms, p99 {median['p99_ms']:.2f} ms, saturated "
        f"{median['saturated_tokens_per_s']:.1f} tok/s"
    )
    print(f"decode throughput: {median['decode_tokens_per_s']:.1f} tokens/s (the steps without a prefill chunk)")
    print(f"throughput: {median['tokens_per_s']:.1f} tokens/s")  # last: an A/B reads the last tokens/s printed
    return 0


if __name__ == "__main__":
    sys.exit(main())
