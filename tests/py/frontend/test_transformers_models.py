# Code nobody here wrote: Hugging Face transformers models (small random
# configurations, nothing downloaded) captured whole under kiln.compile, with
# outputs equal to eager, and generation through a compiled forward.
import pytest
import torch

import kiln

transformers = pytest.importorskip("transformers")

WIDTH, LAYERS, HEADS, VOCABULARY = 64, 2, 2, 300
# The version setup installs: its models are known to capture whole. Others
# (the GPU machine's) are checked for results only.
PINNED = transformers.__version__ == "5.23.0"


def _decoder(**config):
    return dict(vocab_size=VOCABULARY, bos_token_id=0, eos_token_id=0, **config)


MODELS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, n_positions=64,
        use_cache=False, **_decoder())),
    "bert": lambda: transformers.BertModel(transformers.BertConfig(
        vocab_size=VOCABULARY, hidden_size=WIDTH, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=4 * WIDTH)),
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=1, intermediate_size=3 * WIDTH, use_cache=False,
        **_decoder())),
    "t5": lambda: transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=VOCABULARY, d_model=WIDTH, d_kv=WIDTH // HEADS,
        d_ff=4 * WIDTH, num_layers=LAYERS, num_heads=HEADS)),
}


def _tensors(output):
    if isinstance(output, torch.Tensor):
        return [output]
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in _tensors(item)]
    return []


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_model_is_captured_in_one_graph(name):
    model = MODELS[name]().eval()
    compiled = kiln.compile(model)
    with torch.no_grad():
        for batch in (2, 2, 3):
            ids = torch.randint(0, VOCABULARY, (batch, 12))
            expected, actual = model(ids), compiled(ids)
            assert type(actual) is type(expected)
            assert list(actual.keys()) == list(expected.keys())
            for a, e in zip(_tensors(actual), _tensors(expected)):
                torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)
    info = kiln.cache_info(compiled)
    if PINNED:
        assert not info["runs_in_cpython"], info["fallback_reason"]
        assert info["breaks"] == [] and info["entries"] == 2, info["break_reasons"]
        # No op of the static graph calls torch: attention-mask positions,
        # token types gathered from a buffer, relative-position buckets are
        # all kernels.
        assert " 0 extern" in info["runners"][0], info["runners"]


def test_vit_is_captured_in_one_graph():
    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=WIDTH,
                                    num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                    intermediate_size=2 * WIDTH)
    model = transformers.ViTModel(config, add_pooling_layer=False).eval()
    compiled = kiln.compile(model)
    with torch.no_grad():
        images = torch.randn(2, 3, 32, 32)
        expected, actual = model(images), compiled(images)
    torch.testing.assert_close(actual.last_hidden_state, expected.last_hidden_state,
                               atol=1e-4, rtol=1e-4)
    info = kiln.cache_info(compiled)
    assert not PINNED or (not info["runs_in_cpython"] and info["breaks"] == [])


def test_gpt2_generates_the_same_tokens_through_a_compiled_forward():
    config = transformers.GPT2Config(n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
                                     n_positions=64, **_decoder())
    model = transformers.GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, VOCABULARY, (1, 6))
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
        model.forward = kiln.compile(model.forward)
        actual = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(actual, expected)
    info = kiln.cache_info(model.forward)
    # The prompt, the first step, then one capture with the key/value cache's
    # length symbolic serves every later step (dynamic shapes); the cache's
    # attribute writes are replayed, not a fallback.
    if PINNED:
        assert not info["runs_in_cpython"], info["fallback_reason"]
        assert info["graph_count"] >= 1
        assert info["entries"] <= 3 and "dynamic" in info["runners"][-1], info["runners"]
