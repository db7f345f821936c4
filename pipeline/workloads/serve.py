"""A HuggingFace decoder built from its config (random weights, nothing downloaded), served as an inference
server schedules it, so that its GEMMs meet the token counts a server runs:

    python -m pipeline.workloads.serve --arch llama3-8b [--layers 4] [--seed 0] [--eager] [--compile] [--fp8]

* **Requests** drawn from ``--seed``: ``--requests`` of them, prompt lengths uniform in ``--prompt-min..max``,
  output lengths in ``--output-min..max``, all waiting at the start (an offline batch, as a benchmark serves).
* **Continuous batching**: up to ``--max-seqs`` requests run at once, each in a slot of a preallocated KV cache;
  a finished request frees its slot and the next waiting one takes it at the next step.
* **Chunked prefill**: each step prefills at most ``--max-batched-tokens`` prompt tokens, taken first come first
  served and split across steps where a prompt is longer. **Decode**: every request past its prompt decodes one
  token a step.
* **One forward pass a step** (``engine.py``), prompt and decode tokens flattened; a step of at most
  ``--max-capture`` tokens padded up to a CUDA-graph capture size and, unless ``--eager``, replayed as the graph
  captured for it at start-up; a larger one eager. ``--compile``: the layers compiled, as vLLM serves by default.

Greedy sampling, one host sync a step (a server reads the sampled tokens each step). Prints, per timed pass and as
medians over ``--repeat`` passes after an untimed warm-up pass of the same schedule: steps, p50/p99 step latency,
the saturated output rate (the steps while requests waited for a slot) and last the pass's output rate,
``throughput: X tokens/s`` (every output token over the wall time of every step: the ramp at the start and the
drain at the end included, as a benchmark of an offline batch counts them; the model's build and the graphs'
capture are outside it).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .engine import CAPTURE_SIZES, Engine, Request, Step
from .hf import ARCHS, build, depth

NO_GPU_EXIT_CODE = 3
BAD_OUTPUT_EXIT_CODE = 12  # the project's bad-input code (pipeline/errors.py INPUT; workloads import nothing of it)
SERVED_ARCHS = ("llama", "mistral", "llama3-8b", "qwen2-7b")  # decoders of the Llama layout (q/k/v/o, gate/up/down)
PROJECTIONS = (("q_proj", "k_proj", "v_proj", "o_proj"), ("gate_proj", "up_proj", "down_proj"))


def draw_requests(seed: int, count: int, prompt: tuple[int, int], output: tuple[int, int], vocab: int) -> list[Request]:
    """The request mix of ``seed``: prompt and output lengths uniform in their ranges, prompt tokens uniform."""
    rng = random.Random(seed)
    return [
        Request([rng.randrange(1, vocab) for _ in range(rng.randint(*prompt))], rng.randint(*output))
        for _ in range(count)
    ]


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
        first, decoded = engine.step(step)
        for request, _, length in step.chunks:
            request.prefilled += length
            if id(request) in first:
                request.generated.append(first[id(request)])
        for request, token in zip(step.decodes, decoded, strict=True):
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
    parser.add_argument("--eager", action="store_true", help="every step eager, without CUDA graphs")
    parser.add_argument(
        "--max-capture",
        type=int,
        help="the largest step (tokens) run as a CUDA graph, as vLLM's max_cudagraph_capture_size; default: "
        "vLLM's, twice --max-seqs up to 512",
    )
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
    if args.max_capture is None:
        args.max_capture = min(2 * args.max_seqs, CAPTURE_SIZES[-1])
    elif not 1 <= args.max_capture <= CAPTURE_SIZES[-1]:
        bad.append(f"max-capture {args.max_capture} (1 to {CAPTURE_SIZES[-1]})")
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
            engine.capture([size for size in CAPTURE_SIZES if size <= args.max_capture])
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
    mode = ("eager" if not graphs else f"CUDA graphs to {args.max_capture} tokens") + (
        ", compiled" if args.compile else ""
    )
    print(
        f"serve {args.arch} ({args.layers} layers, seed {args.seed}, {args.requests} requests, {mode}): "
        f"step p50 {median['p50_ms']:.2f} ms, p99 {median['p99_ms']:.2f} ms, saturated "
        f"{median['saturated_tokens_per_s']:.1f} tok/s"
    )
    print(f"decode throughput: {median['decode_tokens_per_s']:.1f} tokens/s (the steps without a prefill chunk)")
    print(f"throughput: {median['tokens_per_s']:.1f} tokens/s")  # last: an A/B reads the last tokens/s printed
    return 0


if __name__ == "__main__":
    sys.exit(main())
