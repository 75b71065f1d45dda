"""held_autocast_weights / held_lm_logits: under bf16 autocast the hf engine casts a frozen base (and a frozen
LM head) once per generate call instead of at every decode step, with bit-identical outputs; what a sync
rewrites, and an embedding tied to the head, stay fp32."""

import pytest
import torch

from rlx.models.forward import causal_lm, lm_logits
from rlx.models.held import held_autocast_weights, held_lm_logits
from tests.rollout.conftest import make_engine
from tests.tiny import tiny_policy


def _linears(policy):
    return {n: q for n, q in policy.named_parameters() if n.endswith(".weight") and "embed" not in n and "norm" not in n}


def test_frozen_linears_are_held_in_bf16_with_the_same_logits_and_restored_after(tiny_lora_policy):
    policy, tok = tiny_lora_policy
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    before = {n: (q.data_ptr(), q.dtype) for n, q in policy.named_parameters()}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain = policy(input_ids=ids).logits
        with held_autocast_weights(policy, "cpu"):
            dtypes = {n: q.dtype for n, q in _linears(policy).items()}
            held = policy(input_ids=ids).logits
    assert torch.equal(plain, held)
    frozen = {n for n, q in _linears(policy).items() if not q.requires_grad}
    assert frozen and all(dtypes[n] == torch.bfloat16 for n in frozen)  # base q/k/v/o/mlp and the untied head
    assert all(dtypes[n] == torch.float32 for n in dtypes if "lora_" in n)  # trainable: autocast caches those itself
    assert {n: (q.data_ptr(), q.dtype) for n, q in policy.named_parameters()} == before  # the fp32 tensors are back


def test_outside_autocast_nothing_is_held(tiny_lora_policy):
    policy, _ = tiny_lora_policy
    with held_autocast_weights(policy, "cpu"):
        assert all(q.dtype == torch.float32 for q in policy.parameters())


def test_skip_names_and_a_tied_head_stay_fp32(tiny_lora_policy):
    policy, _ = tiny_lora_policy
    lm = causal_lm(policy)
    lm.lm_head.weight = lm.model.embed_tokens.weight  # tie: the lookup must stay fp32
    skip = {next(n for n, q in policy.named_parameters() if n.endswith("q_proj.base_layer.weight"))}
    with torch.autocast("cpu", dtype=torch.bfloat16), held_autocast_weights(policy, "cpu", skip=skip):
        params = dict(policy.named_parameters())
        assert params[next(iter(skip))].dtype == torch.float32
        assert lm.model.embed_tokens.weight.dtype == torch.float32
        assert any(q.dtype == torch.bfloat16 for q in params.values())


@pytest.mark.parametrize("fp32_head", [False, True])
def test_held_head_gives_the_logits_of_lm_logits(tiny_lora_policy, fp32_head):
    policy, _ = tiny_lora_policy
    lm = causal_lm(policy)
    hidden = torch.randn(3, lm.config.hidden_size)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = lm_logits(lm, hidden, fp32_head)
        got = held_lm_logits(lm, fp32_head, "cpu", frozen=True)(hidden)
    assert got.dtype == torch.float32 and torch.equal(want, got)


def test_bf16_hf_engine_samples_as_without_holding_and_keeps_synced_weights_fp32(tmp_path):
    from rlx.rollout import SamplingParams

    policy, tok = tiny_policy(tmp_path)
    engine = make_engine("hf", policy, tok, tmp_path, dtype="bf16")
    params = SamplingParams(max_tokens=10, temperature=1.0)
    seen = []
    engine.between_steps = lambda: seen.append({n: q.dtype for n, q in _linears(engine.policy).items()})
    a = engine.generate(["3+4=", "hello"], 2, params, torch.Generator().manual_seed(0))
    assert seen and all(d[n] == torch.float32 for d in seen for n in d if "lora_" in n)
    assert any(d[n] == torch.bfloat16 for d in seen for n in d if "lora_" not in n)
    # the reference: the same decode loop with every weight recast at each call (holding defeated by making
    # the base trainable, which autocast caches and the engine leaves alone)
    engine.between_steps = None
    for q in policy.parameters():
        q.requires_grad_(True)
    b = engine.generate(["3+4=", "hello"], 2, params, torch.Generator().manual_seed(0))
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert torch.equal(a.logprobs, b.logprobs) and torch.equal(a.entropy, b.entropy)


def test_in_flight_sync_into_an_own_copy_writes_the_fp32_adapter(tmp_path):
    from omegaconf import OmegaConf

    from rlx.rollout.config import RolloutConfig
    from rlx.run.config import TrainerConfig
    from rlx.run.device import resolve
    from rlx.rollout import SamplingParams, build_engine
    from rlx.models.trainable import trainable_state

    policy, tok = tiny_policy(tmp_path)
    cfg = OmegaConf.merge(OmegaConf.structured(RolloutConfig), {"engine": "hf"})
    trainer = resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype="bf16")))
    engine = build_engine(cfg, tok, policy, trainer, base_dir=tmp_path, seed=0, max_len=96, own_weights=True)
    with torch.no_grad():
        for n, q in policy.named_parameters():
            if "lora_B" in n:
                q.add_(0.5)  # version 1 differs from the copy's version 0
    payload = engine.export_weights(policy)
    engine.between_steps = lambda: engine.load_weights(payload, 1)  # a new version arrives mid-sequence
    engine.generate(["3+4="], 1, SamplingParams(max_tokens=6, temperature=0.0), torch.Generator().manual_seed(0))
    copy = trainable_state(policy)
    served = {n: q for n, q in engine.policy.named_parameters() if n in copy}
    assert all(served[n].dtype == torch.float32 and torch.equal(served[n], copy[n]) for n in copy)
    assert all(q.dtype == torch.float32 for q in engine.policy.parameters())  # the held casts are gone
