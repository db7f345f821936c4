"""The serving workload's engine: a HuggingFace decoder's forward pass over the tokens of a server's step, with
the slots' KV cache (``serve.py`` schedules the steps).

* **One forward pass a step**, as vLLM runs a mixed batch: the step's prompt tokens and decode tokens flattened
  (M = their count). A step of a size that was captured (``Engine.capture``) is padded up to the next of vLLM's
  CUDA-graph capture sizes (1, 2, 4, 8, 16, ..., ``vllm/config/compilation.py``) and runs as that size's CUDA
  graph (static token, slot and position rows; the padding rows write a scratch slot; each row attends its slot's
  cache up to its position). Any other step runs eager and unpadded, attention one masked call a layer over the
  rows' contexts side by side (as a variable-length kernel). The logits are taken of the sampled rows alone,
  outside the graph, as vLLM's ``compute_logits``.
* **Compiled** (``compiled=True``): the layers through ``torch.compile`` (Inductor's default mode), as vLLM serves
  by default: a layer's norms, rotary and activations fuse around its GEMMs, which stay library calls. One layer
  of fixed shapes is compiled, captured per size, and serves every layer; one layer of the eager pass is compiled
  for any token count.
* The model's own modules run every GEMM (``q/k/v/o_proj``, the MLP, ``lm_head``); attention is the server's own
  (``scaled_dot_product_attention`` over the slot's cache), as servers bring their own attention.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

# vLLM's CUDA-graph capture sizes up to 512; the M grid's too (mgrid.CAPTURE_SIZES: the workload imports no stage)
CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))


def padded_size(batch: int) -> int:
    """The capture size a step of ``batch`` tokens is padded up to."""
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


@dataclass(frozen=True)
class Step:
    """What one step runs: prefill chunks (request, start, length) and the requests that decode."""

    chunks: tuple[tuple[Request, int, int], ...]
    decodes: tuple[Request, ...]

    @property
    def prefill_tokens(self) -> int:
        return sum(length for _, _, length in self.chunks)


class Engine:
    """The slots' KV cache and the forward pass of one model over a step's tokens: captured per padded size,
    or eager over any count."""

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
        self.graphs: dict[int, tuple] = {}  # capture size -> (graph, its rows' token/slot/position, its output)
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        self.rotate = apply_rotary_pos_emb
        # the forward passes as vLLM runs them by default: Inductor fuses a layer's elementwise work (norms,
        # rotary, activations, cache writes) around its GEMMs, which stay library calls, and ``capture`` records
        # the compiled pass of fixed shapes. One layer is compiled and serves every layer (the layers differ only
        # in their weights and cache, both inputs), so a 32-layer model compiles as fast as a one-layer one. The
        # flattened pass's token count is new at almost every step: its layer compiles for any count (``dynamic``)
        self.slot_layer, self.flat_layer = self._slot_layer, self._flat_layer
        if compiled:
            self.slot_layer = torch.compile(self._slot_layer)
            self.flat_layer = torch.compile(self._flat_layer, dynamic=True)

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

    # -- a step ------------------------------------------------------------------------------------------------
    def step(self, step: Step) -> tuple[dict[int, int], list[int]]:
        """One forward pass over every token of ``step``, as a server runs a mixed batch: each chunk's prompt
        tokens, then each decoding request's last token. Returns the first token of each request whose prompt the
        step completes (by ``id``) and the next token of each decode. The batch runs as the CUDA graph of its
        size padded up (``capture``; the padding rows write the scratch slot) where one was captured, else eager.
        The logits are taken of the sampled rows alone, outside the graph, as vLLM's ``compute_logits``."""
        torch = self.torch
        spans = [*step.chunks, *((r, r.prompt + len(r.generated) - 1, 1) for r in step.decodes)]  # (request, at, n)
        ids = [t for r, start, n in step.chunks for t in r.ids[start : start + n]] + [
            r.generated[-1] for r in step.decodes
        ]
        slots = [r.slot for r, _, n in spans for _ in range(n)]
        positions = [at for _, start, n in spans for at in range(start, start + n)]
        ends = list(itertools.accumulate(n for _, _, n in step.chunks))  # each chunk's last row + 1
        finishing = [(r, at - 1) for (r, start, n), at in zip(step.chunks, ends, strict=True) if start + n == r.prompt]
        sampled = [at for _, at in finishing] + list(range(step.prefill_tokens, len(ids)))  # then each decode's row
        size = padded_size(len(ids)) if len(ids) <= CAPTURE_SIZES[-1] else 0
        if size in self.graphs:
            graph, rows, hidden = self.graphs[size]
            pad = size - len(ids)
            rows.copy_(torch.tensor([ids + [1] * pad, slots + [self.scratch] * pad, positions + [0] * pad]))
            graph.replay()
        else:
            hidden = self._flattened(spans, *(torch.tensor(v, device=self.device) for v in (ids, slots, positions)))
        made = self._sample(hidden, torch.tensor(sampled, device=self.device)).tolist()
        first = {id(r): token for (r, _), token in zip(finishing, made[: len(finishing)], strict=True)}
        return first, made[len(finishing) :]

    def _sample(self, hidden, rows):
        """The greedy next token of each of ``rows`` of the final hidden states."""
        return self.model.lm_head(hidden[rows]).argmax(-1)

    # -- the eager pass: any token count -------------------------------------------------------------------------
    def _flattened(self, spans: Sequence[tuple[Request, int, int]], ids, slots, positions):
        """The final hidden states of ``spans`` (request, first position, tokens) run as one flattened batch.
        Attention too is one call a layer, as a server's variable-length kernel: each token attends its own
        request's cache up to its position (a mask over the spans' contexts side by side, each read once)."""
        torch = self.torch
        reads: tuple[list[int], ...] = ([], [], [])  # per cache entry attended: its slot, position and span
        owners: list[int] = []  # per token: its span
        for owner, (request, start, length) in enumerate(spans):
            owners += [owner] * length
            end = start + length
            for column, values in zip(reads, ([request.slot] * end, range(end), [owner] * end), strict=True):
                column.extend(values)
        owners_ = torch.tensor(owners, device=self.device)
        read_slots, read_positions, read_owners = (torch.tensor(v, device=self.device) for v in reads)
        mask = (owners_[:, None] == read_owners[None, :]) & (read_positions[None, :] <= positions[:, None])
        x = self.model.model.embed_tokens(ids)
        rotation = self._rotation(x, positions)
        for layer, keys, values in zip(self.layers, self.keys, self.values, strict=True):
            x = self.flat_layer(layer, x, rotation, keys, values, slots, positions, read_slots, read_positions, mask)
        return self.model.model.norm(x)

    def _flat_layer(self, layer, x, rotation, keys, values, slots, positions, read_slots, read_positions, mask):
        """One layer of the flattened pass: each token's k and v written at its slot and position, then attention
        of every token over the cache entries read (``read_slots``, ``read_positions``), as ``mask`` allows."""

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

    # -- the captured pass: a fixed token count ------------------------------------------------------------------
    def _slot_layer(self, layer, x, rotation, keys, values, slots, positions, mask):
        """One layer of the pass of fixed shapes: each row's k and v written at its slot and position, then
        attention of each row over its slot's whole cache up to its position (``mask``); rows of one request
        see each other's entries, written first."""

        def attend(q, k, v):
            self._store(keys, values, slots, positions, k, v)
            out = self.torch.nn.functional.scaled_dot_product_attention(
                q[0].transpose(0, 1)[:, :, None], keys[slots], values[slots], attn_mask=mask, enable_gqa=True
            )
            return out[:, :, 0].reshape(x.shape[0], -1)

        return self._block(layer, x, rotation, attend)

    def _by_slot(self, ids, slots, positions):
        """The final hidden states of rows given by their token, slot and position, in shapes fixed by their
        count (what ``capture`` records)."""
        rows = self.torch.arange(self.max_len, device=self.device)
        mask = (rows[None, :] <= positions[:, None])[:, None, None, :]
        x = self.model.model.embed_tokens(ids)
        rotation = self._rotation(x, positions)
        for layer, keys, values in zip(self.layers, self.keys, self.values, strict=True):
            x = self.slot_layer(layer, x, rotation, keys, values, slots, positions, mask)
        return self.model.model.norm(x)

    def capture(self, sizes: Sequence[int]) -> None:
        """A CUDA graph of the pass of fixed shapes for each of ``sizes`` (token counts), over static buffers, as
        engines capture at start: the largest first, all in one memory pool (one graph replays at a time)."""
        torch = self.torch
        pool = torch.cuda.graph_pool_handle()
        for size in sorted(sizes, reverse=True):
            rows = torch.tensor([[1] * size, [self.scratch] * size, [0] * size], device=self.device)  # one copy a step
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._by_slot(*rows)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                out = self._by_slot(*rows)
            self.graphs[size] = (graph, rows, out)
