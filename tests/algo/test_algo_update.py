"""rlx.algo.Update on a real tiny LoRA policy: trimming padding changes the work, not the update."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from rlx.algo import Shaped, Update
from rlx.config import RLXConfig
from rlx.run.config import TrainerConfig
from rlx.run.device import resolve
from rlx.rollout import SamplingParams, build_engine
from tests.tiny import tiny_policy


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    policy, tok = tiny_policy(tmp_path_factory.mktemp("policy"))
    cfg = OmegaConf.structured(RLXConfig)
    trainer = resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype="fp32")))
    engine = build_engine(cfg.rollout, tok, policy, trainer)
    prompts = ["1+2=", "(3+4)*5=", "a", "hello world", "9-8="]
    batch = engine.generate(prompts, 4, SamplingParams(max_tokens=12), torch.Generator().manual_seed(0))
    return policy, cfg, trainer, batch


def run_update(policy, cfg, trainer, batch, trim: bool, beta: float = 0.0, tis: float = 0.0):
    cfg = OmegaConf.merge(cfg, {"algo": {"trim_padding": trim, "micro_batch_size": 6, "beta": beta, "tis_cap": tis,
                                         "aggregation": "token"}, "rollout": {"max_new_tokens": 12}})
    params = [p for p in policy.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    rewards = torch.arange(len(batch), dtype=torch.float32) % 3  # varied within groups
    m, _ = Update.from_config(cfg, trainer, sched)(policy, opt, Shaped(batch, rewards), None, 1)
    delta = [p.detach() - s for p, s in zip(params, saved)]  # = -grad (SGD, lr 1, clip 1)
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)
    return m, delta


@pytest.mark.parametrize("beta,tis", [(0.0, 0.0), (0.1, 2.0)])
def test_trim_padding_same_update(setup, beta, tis):
    policy, cfg, trainer, batch = setup
    lengths = batch.lengths
    assert lengths.min() < lengths.max() and batch.prompt_mask.sum(1).min() < batch.prompt_mask.shape[1]
    m0, d0 = run_update(policy, cfg, trainer, batch, trim=False, beta=beta, tis=tis)
    m1, d1 = run_update(policy, cfg, trainer, batch, trim=True, beta=beta, tis=tis)
    for a, b in zip(d0, d1):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert any(a.abs().max() > 0 for a in d0)
    # token means and the gradient do not depend on the split (actor/loss, a token-weighted mean of
    # micro-batch shares of the full loss, does, so it is not compared)
    for k in ("actor/pg_loss", "actor/ratio/mean", "rollout/logprob_diff/mean", "actor/grad_norm"):
        assert m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-7), k
    if beta > 0:
        assert m1["actor/kl"] == pytest.approx(m0["actor/kl"], rel=1e-4, abs=1e-7)


def _stale(policy, batch, shift: float):
    """The same batch after the policy moved on: LoRA B shifted, the behaviour log-probs kept."""
    lora_b = [p for n, p in policy.named_parameters() if "lora_B" in n]
    saved = [p.detach().clone() for p in lora_b]
    with torch.no_grad():
        for p in lora_b:
            p.add_(shift * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    return saved, lora_b


def _update_with(policy, cfg, trainer, batch, **algo):
    return run_update(policy, OmegaConf.merge(cfg, {"algo": algo}), trainer, batch, trim=False)


def test_ratio_is_taken_against_the_behaviour_logprobs(setup):
    """actor/ratio/mean = masked mean of exp(trainer - behaviour): the rollout's log-probs, not the trainer's."""
    from rlx.models.forward import token_logprobs

    policy, cfg, trainer, batch = setup
    saved, lora_b = _stale(policy, batch, 0.3)
    try:
        with torch.no_grad():
            now = token_logprobs(policy, batch.input_ids, batch.attention_mask, batch.completion_ids.shape[1], 1.0)
        m = batch.completion_mask.bool()
        want = torch.exp(now - batch.logprobs)[m].mean().item()
        got, _ = _update_with(policy, cfg, trainer, batch, loss="ppo_clip")
        assert abs(want - 1.0) > 0.01  # the data is really off-policy
        assert got["actor/ratio/mean"] == pytest.approx(want, rel=1e-4)
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved):
                p.copy_(s)


def test_cispo_and_ppo_clip_differ_only_off_policy(setup):
    """On-policy (ratio 1) CISPO and PPO-clip have the same gradient; on stale data they do not."""
    policy, cfg, trainer, batch = setup
    _, d_cispo = _update_with(policy, cfg, trainer, batch, loss="cispo", eps_max=4.0)
    _, d_ppo = _update_with(policy, cfg, trainer, batch, loss="ppo_clip", eps_low=0.2, eps_high=0.28)
    for a, b in zip(d_cispo, d_ppo):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    saved, lora_b = _stale(policy, batch, 0.3)
    try:
        _, s_cispo = _update_with(policy, cfg, trainer, batch, loss="cispo", eps_max=4.0)
        _, s_ppo = _update_with(policy, cfg, trainer, batch, loss="ppo_clip", eps_low=0.2, eps_high=0.28)
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved):
                p.copy_(s)
    gap = max((a - b).abs().max().item() for a, b in zip(s_cispo, s_ppo))
    size = max(a.abs().max().item() for a in s_cispo)
    assert gap > 0.05 * size, (gap, size)


def test_mask_interrupted_drops_interrupted_rows_from_the_loss(setup):
    policy, cfg, trainer, batch = setup
    from dataclasses import replace

    half = torch.arange(len(batch)) % 2 == 0
    marked = replace(batch, interrupted=half)
    _, d_keep = run_update(policy, cfg, trainer, marked, trim=False)
    on = OmegaConf.merge(cfg, {"rollout": {"interrupt": {"mask_interrupted": True}}})
    _, d_mask = run_update(policy, on, trainer, marked, trim=False)
    only = replace(batch, completion_mask=batch.completion_mask * (~half).long().unsqueeze(1))
    _, d_only = run_update(policy, cfg, trainer, only, trim=False)  # the same rows removed by hand
    assert max((a - b).abs().max().item() for a, b in zip(d_keep, d_mask)) > 0
    for a, b in zip(d_mask, d_only):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_dp_backward_scales_a_live_loss_and_zeroes_a_dead_repeat():
    """A live micro-batch backpropagates loss x loss_scale (N ranks: N, as DDP averages); a dead repeat the
    same graph times 0: every rank runs the same backwards, the repeat adds no gradient."""
    from rlx.algo.data_parallel import DataParallel
    from rlx.run.distributed import World

    dp = DataParallel(torch.nn.Linear(1, 1), World())
    assert dp.loss_scale == 1.0  # one process
    dp.loss_scale = 3.0  # what three ranks set
    w = torch.tensor(2.0, requires_grad=True)
    dp.backward(w * 5.0, live=True)
    assert w.grad.item() == 15.0  # d(3 * 5 w) / dw
    w.grad = None
    dp.backward(w * 5.0, live=False)
    assert w.grad.item() == 0.0
