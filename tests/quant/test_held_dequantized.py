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
    from tests.rollout.conftest import make_engine
    from tests.tiny import tiny_policy

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


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_update_on_a_packed_base_dequantizes_once_and_trains_as_before(tmp_path, dtype):
    """The policy update holds each packed weight for its whole call (KL reference, every micro-batch's
    forward and backward): one dequantization per layer instead of one per forward, and bitwise the
    same parameter change and metrics as dequantizing at every forward."""
    from omegaconf import OmegaConf

    from rlx.algo import Shaped, Update
    from rlx.config import RLXConfig
    from rlx.rollout import SamplingParams, build_engine
    from rlx.run.config import TrainerConfig
    from rlx.run.device import resolve
    from tests.tiny import tiny_policy

    policy, tok = tiny_policy(tmp_path)
    quantize_model(policy.base_model.model, QuantConfig(format="nvfp4"))
    trainer = resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype=dtype)))
    cfg = OmegaConf.merge(OmegaConf.structured(RLXConfig), {
        "algo": {"micro_batch_size": 4, "beta": 0.1, "aggregation": "token"}, "rollout": {"max_new_tokens": 10}})
    batch = build_engine(cfg.rollout, tok, policy, trainer).generate(
        ["1+2=", "(3+4)*5=", "hello"], 4, SamplingParams(max_tokens=10), torch.Generator().manual_seed(0))
    rewards = torch.arange(len(batch), dtype=torch.float32) % 3
    layers = [m for m in policy.modules() if isinstance(m, QuantLinear)]
    params = [p for p in policy.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    calls = _count_dequantizations(policy)

    def update(hold: bool):
        calls["n"] = 0
        opt = torch.optim.SGD(params, lr=1.0)
        up = Update.from_config(cfg, trainer, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0))
        up.hold_packed_base = hold
        m, _ = up(policy, opt, Shaped(batch, rewards), None, 1)
        delta = [p.detach() - s for p, s in zip(params, saved)]
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
        return m, delta, calls["n"]

    m_plain, d_plain, n_plain = update(hold=False)
    m_held, d_held, n_held = update(hold=True)
    # 12 rows in micro-batches of 4: the reference pass and the training pass forward each of the 3
    assert n_plain >= 6 * len(layers) and n_held == len(layers)
    assert any(d.abs().max() > 0 for d in d_plain)
    assert all(torch.equal(a, b) for a, b in zip(d_plain, d_held))
    assert {k: v for k, v in m_plain.items() if not k.startswith("timing")} == \
        {k: v for k, v in m_held.items() if not k.startswith("timing")}
    assert all(m._held is None for m in layers)
