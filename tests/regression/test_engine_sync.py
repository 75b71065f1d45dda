"""After a LoRA update, every engine samples from the new weights: its behaviour log-probs move by what the
trainer's update predicts. One real trainer update (GRPO loss through rlx.algo.Update, AdamW) on the
engine's own samples, then `engine.sync`; on fresh samples the engine's log-probs must equal the trainer's
log-probs under the new weights (fp32: the conformance bounds) and must have left the old ones by the
update's whole change. The same check given a sync of the old (frozen) weights must fail: it is run here
too, so the test shows it can tell the two apart.

Engines: hf with its own copy of the weights (as rollout.mode=async builds it; in sync mode it samples the
trainer's module itself), colocated vLLM (`rollout=vllm`, merged sync: the CPU default; adapter sync as a
slow variant) and one local vLLM server (`rollout=vllm_server`, adapter sync; slow), on the tiny LoRA policy of
tests/rollout/conftest.py (head_dim 32 for vLLM's CPU attention)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from rlx.algo import Shaped, Update
from rlx.config import RLXConfig
from rlx.models.forward import token_logprobs
from rlx.rollout import SamplingParams, build_engine
from rlx.run.config import TrainerConfig
from rlx.run.device import resolve
from tests.rollout.conftest import engine_params, make_engine
from tests.tiny import tiny_policy

PROMPTS = ["3+4=", "12-5=", "7*8=", "hello", "99+1=", "(2+3)*4="]
SAMPLING = SamplingParams(max_tokens=12, temperature=1.0)
FP32_MEAN, FP32_MAX = 1e-4, 2e-3  # |trainer - engine| per token on the same weights (tests/rollout/test_conformance.py)
MIN_CHANGE = 0.05  # mean |log-prob change| the update must make, so that old and new weights are far apart
LR = 0.02
# the server row starts a server (~40 s) and is `slow`: a server's adapter sync is checked fast by
# tests/rollout/test_server.py (the canary stops a server still serving the old adapter; a run's every step
# samples the version just synced, at the trainer's log-probs)
ENGINES = engine_params(["hf", "vllm", "vllm-adapter", "vllm-server"], slow=("vllm-adapter", "vllm-server"))


def trainer():
    return resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype="fp32")))


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_policy")
    policy, tok = tiny_policy(path)
    return path, policy, tok


@pytest.fixture
def engine(request, policy_dir):
    path, policy, tok = policy_dir
    if request.param == "hf":
        cfg = OmegaConf.merge(OmegaConf.structured(RLXConfig).rollout, {"engine": "hf"})
        e = build_engine(cfg, tok, policy, trainer(), base_dir=path, seed=0, max_len=96, own_weights=True)
    else:
        pytest.importorskip("vllm")
        e = make_engine(request.param, policy, tok, path)
    e.sync(policy, 0)  # as rlx.train.build does after building any engine (vLLM's constructors sync too)
    yield e
    e.close()


def lora(policy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}


def put(policy, weights: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if n in weights:
                p.copy_(weights[n])


def logprobs(policy, batch):  # [N, T] the trainer's log-probs of the batch's tokens
    with torch.no_grad():
        return token_logprobs(policy, batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1])


def update(policy, batch) -> dict:
    """One trainer update: GRPO (ppo_clip, group advantages) on the batch, rewards varied within each group."""
    cfg = OmegaConf.merge(OmegaConf.structured(RLXConfig), {"algo": {"micro_batch_size": 8, "lr": LR},
                                                            "rollout": {"max_new_tokens": SAMPLING.max_tokens}})
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    rewards = (batch.completion_mask.sum(1) % 2).float()  # odd-length completions pay: a signal the policy can follow
    m, _ = Update.from_config(cfg, trainer(), sched)(policy, opt, Shaped(batch, rewards), None, 1)
    return m


def follows(engine_lp, new_lp, old_lp, mask) -> None:
    """The engine's log-probs are the trainer's new ones, and differ from the old ones by the update's change."""
    m = mask.bool()
    predicted = (new_lp - old_lp)[m]  # what the update changed, on these tokens
    moved = (engine_lp - old_lp)[m]  # what the engine's sync changed
    assert predicted.abs().mean() > MIN_CHANGE, f"the update hardly moved the policy ({predicted.abs().mean():.3g})"
    err = (moved - predicted).abs()  # = |engine - trainer's new|
    assert err.mean() < FP32_MEAN and err.max() < FP32_MAX, (
        f"the engine's log-probs changed by {moved.abs().mean():.4g} on average, the update predicts "
        f"{predicted.abs().mean():.4g}: |engine - trainer| mean {err.mean():.3g} max {err.max():.3g} (engine behind "
        f"the trainer: the sync did not deliver the new weights)")


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_a_lora_update_reaches_the_engine_and_a_frozen_sync_is_caught(engine, policy_dir):
    _, policy, _ = policy_dir
    old = lora(policy)
    try:
        before = engine.generate(PROMPTS, 4, SAMPLING, torch.Generator().manual_seed(0))
        d = (logprobs(policy, before) - before.logprobs).abs()[before.completion_mask.bool()]
        assert d.mean() < FP32_MEAN, d.mean()  # the engine serves the trainer's weights before the update
        update(policy, before)
        new = lora(policy)
        assert any(not torch.equal(new[n], old[n]) for n in old)
        engine.sync(policy, 1)
        after = engine.generate(PROMPTS, 4, SAMPLING, torch.Generator().manual_seed(1))
        assert (after.version == 1).all()
        new_lp = logprobs(policy, after)
        put(policy, old)
        old_lp = logprobs(policy, after)
        follows(after.logprobs, new_lp, old_lp, after.completion_mask)
        # a sync that delivers the old weights (what a broken export would send) fails the same check
        engine.sync(policy, 2)  # the policy holds the old weights now
        put(policy, new)
        stale = engine.generate(PROMPTS, 4, SAMPLING, torch.Generator().manual_seed(1))
        with pytest.raises(AssertionError, match="engine behind the trainer"):
            follows(stale.logprobs, logprobs(policy, stale), old_lp_of(policy, stale, old), stale.completion_mask)
    finally:
        put(policy, old)


def old_lp_of(policy, batch, old: dict):
    """The trainer's log-probs of `batch` under the weights `old` (the policy's own are put back)."""
    now = lora(policy)
    put(policy, old)
    try:
        return logprobs(policy, batch)
    finally:
        put(policy, now)
