"""held_dequantized: the hf engine samples from a packed base with each weight dequantized once per call,
not at every decode step, and gets the same samples, log-probs and entropies as without."""

import pytest
import torch

from rlx.quant import QuantConfig, QuantLinear, quantize_model
from rlx.quant.linear import held_dequantized
from tests.quant.quant_helpers import tiny_qwen, token_ids


@pytest.mark.parametrize("fmt", ["nvfp4", "nf4", "mxfp4"])
def test_held_weights_give_the_same_outputs_and_are_dropped_after(fmt):
    model = quantize_model(tiny_qwen(dtype=torch.float32), QuantConfig(format=fmt)).eval()
    ids = token_ids()
    layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    calls = _count_dequantizations(model)
    with torch.no_grad():
        plain = [model(ids).logits for _ in range(3)]
        assert calls["n"] == 3 * len(layers)  # every forward rebuilds every weight
        calls["n"] = 0
        with held_dequantized(model):
            held = [model(ids).logits for _ in range(3)]
            assert calls["n"] == len(layers)  # once per layer for the whole block
    assert all(torch.equal(a, b) for a, b in zip(plain, held))
    assert all(m._held is None for m in layers)  # the 16-bit copies are gone after the block


def _count_dequantizations(model) -> dict:
    calls = {"n": 0}
    for m in model.modules():  # instance attribute: the class is untouched
        if isinstance(m, QuantLinear):
            m.dequantize = (lambda f: (lambda *a: (calls.__setitem__("n", calls["n"] + 1), f(*a))[1]))(m.dequantize)
    return calls


def test_hf_engine_on_a_packed_base_samples_as_before(tmp_path):
    from rlx.rollout import SamplingParams
    from rlx.rollout.hf import HFEngine
    from tests.rollout.conftest import make_engine, tiny_policy

    policy, tok = tiny_policy(tmp_path)
    quantize_model(policy.base_model.model, QuantConfig(format="nvfp4"))
    engine = make_engine("hf", policy, tok, tmp_path)
    assert isinstance(engine, HFEngine)
    params = SamplingParams(max_tokens=12, temperature=1.0)
    layers = [m for m in policy.modules() if isinstance(m, QuantLinear)]
    calls = _count_dequantizations(policy)
    a = engine.generate(["3+4=", "hello"], 3, params, torch.Generator().manual_seed(0))
    assert calls["n"] == len(layers) and int(a.completion_mask.sum(1).max()) > 1  # once per call, many decode steps
    for m in policy.modules():  # the same engine with holding off: a weight rebuilt at every decode step
        if isinstance(m, QuantLinear):
            m.forward = (lambda mod: (lambda x: torch.nn.functional.linear(x, mod.dequantize(x.dtype), None)))(m)
    b = engine.generate(["3+4=", "hello"], 3, params, torch.Generator().manual_seed(0))
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert torch.equal(a.logprobs, b.logprobs) and torch.equal(a.entropy, b.entropy)
