"""The compiled decode loop of ``pipeline.workloads.hf`` decodes what ``generate`` decodes (greedy, same
model), so the rate it times is of real decoding. On the CPU the step goes through Dynamo (``fullgraph``) and
AOTAutograd but not Inductor's code generation (``aot_eager``: Inductor's C++ build of it took 25 s of the
suite); Inductor compiles it in the GPU test."""

from __future__ import annotations

import pytest

from pipeline.workloads import hf


@pytest.mark.filterwarnings("error:.*past_key_values.*:FutureWarning")  # the cache by the name the model takes
def test_compiled_decode_loop_matches_greedy_generate(monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    compile_ = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, mode, fullgraph: compile_(fn, backend="aot_eager", fullgraph=fullgraph)
    )
    _decodes_as_generate(torch, "cpu")


def test_a_model_is_made_in_its_dtype_and_the_default_dtype_comes_back(monkeypatch):
    """The weights are made in the dtype asked, not in float32 and cast (which doubled the GPU's peak), and
    the process's default dtype is float32 again after the build, whether it succeeded or not."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    head, made_in = transformers.AutoModelForCausalLM, []
    build = head.from_config
    monkeypatch.setattr(head, "from_config", lambda config: made_in.append(torch.get_default_dtype()) or build(config))
    model, _ = hf.build("llama", 1, "bfloat16", "cpu")
    assert made_in == [torch.bfloat16] and torch.get_default_dtype() == torch.float32
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    monkeypatch.setattr(head, "from_config", lambda config: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        hf.build("llama", 1, "float16", "cpu")
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.gpu
def test_the_inductor_compiled_decode_loop_matches_greedy_generate():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers", reason="the HuggingFace models need transformers")
    if not torch.cuda.is_available():
        pytest.skip("Inductor's GPU kernels need a CUDA GPU")
    _decodes_as_generate(torch, "cuda")


def _decodes_as_generate(torch, device: str) -> None:
    torch.manual_seed(0)
    model, config = hf.build("llama", 1, "float32", device)
    decoder = hf.CompiledDecoder(model, config, batch=2, prompt=5, new_tokens=4, device=device, mode="default")
    tokens, seconds = decoder.run(lambda: None)
    assert tokens == 2 * 3 and seconds > 0
    for batch in range(2):  # the second prompt batch reuses the cache from a reset: no stale keys
        if batch:
            decoder.run(lambda: None)
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
