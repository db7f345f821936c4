"""The compiled decode loop of ``pipeline.workloads.hf`` decodes what ``generate`` decodes (greedy, same
model), so the rate it times is of real decoding. CPU: Inductor compiles the step in the default mode."""

from __future__ import annotations

import pytest

from pipeline.workloads import hf


@pytest.mark.long
def test_compiled_decode_loop_matches_greedy_generate():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    torch.manual_seed(0)
    model, config = hf.build("llama", 1, "float32", "cpu")
    decoder = hf.CompiledDecoder(model, config, batch=2, prompt=5, new_tokens=4, device="cpu", mode="default")
    tokens, seconds = decoder.run(lambda: None)
    assert tokens == 2 * 3 and seconds > 0
    ids = decoder.generated[:, :5]
    with torch.inference_mode():
        expected = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
            pad_token_id=0,
        )
    assert torch.equal(decoder.generated, expected)
    decoder.run(lambda: None)  # a second prompt batch reuses the cache from a reset: no stale keys
    ids = decoder.generated[:, :5]
    with torch.inference_mode():
        expected = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
            pad_token_id=0,
        )
    assert torch.equal(decoder.generated, expected)
