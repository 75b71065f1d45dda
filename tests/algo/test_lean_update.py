"""The lean update paths change the work, not the update: chunked log-probs, token-budget packing and
the shared-prefix forward give the plain split's loss and gradient (1e-5 relative) on every loss."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from rlx.algo import Shaped, Update
from rlx.algo.micro_batches import micro_batches
from tests.algo.test_algo_update import setup  # noqa: F401  (a tiny LoRA policy and a batch of 5 prompts x 4)

PLAIN = {"micro_batch_size": 64, "micro_batch_tokens": 0, "shared_prefix": False, "logprob_chunk": 0,
         "trim_padding": False}


def run(setup, **algo):
    policy, cfg, trainer, batch = setup
    cfg = OmegaConf.merge(cfg, {"algo": {**PLAIN, "aggregation": "token", **algo}, "rollout": {"max_new_tokens": 12}})
    params = [p for p in policy.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    rewards = torch.arange(len(batch), dtype=torch.float32) % 3  # varied within groups
    m, _ = Update.from_config(cfg, trainer, sched)(policy, opt, Shaped(batch, rewards), None, 1)
    delta = [p.detach() - s for p, s in zip(params, saved)]  # = -grad (SGD, lr 1; clip 1 scales both alike)
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)
    return m, delta


def assert_same(setup, knobs: dict, base: dict | None = None):
    m0, d0 = run(setup, **(base or {}))
    m1, d1 = run(setup, **(base or {}), **knobs)
    assert any(a.abs().max() > 0 for a in d0)
    # relative L2 error of the whole update (elementwise, a near-zero entry is all float noise)
    err = torch.cat([(b - a).flatten() for a, b in zip(d0, d1)]).norm() / torch.cat([a.flatten() for a in d0]).norm()
    assert err <= 1e-5, err
    for k in ("actor/pg_loss", "actor/ratio/mean", "actor/grad_norm", "actor/kl"):
        if k in m0:
            assert m1[k] == pytest.approx(m0[k], rel=1e-5, abs=1e-7), k
    # the behaviour log-probs came from these same weights: |trainer - rollout| is float noise on both paths
    # (~1e-6 per token, its summation order set by the CPU's kernels), so it is bounded, not compared
    assert m0["rollout/logprob_diff/mean"] < 1e-5 and m1["rollout/logprob_diff/mean"] < 1e-5
    return m0, m1


LOSSES = [{"loss": "ppo_clip"}, {"loss": "cispo"}, {"loss": "gspo"},
          {"loss": "ppo_clip", "beta": 0.1, "tis_cap": 2.0}]


@pytest.mark.parametrize("loss", LOSSES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("knobs", [
    {"logprob_chunk": 7},
    {"micro_batch_tokens": 60},
    {"shared_prefix": True, "micro_batch_size": 8},
    {"shared_prefix": True, "micro_batch_tokens": 50, "logprob_chunk": 16},
], ids=["chunk", "tokens", "shared", "all"])
def test_lean_paths_equal_the_plain_update(setup, loss, knobs):
    assert_same(setup, knobs, loss)


def test_entropy_is_the_same_on_the_chunked_path(setup):
    """vLLM batches carry no entropies: the update measures them, and the chunked head must agree."""
    policy, cfg, trainer, batch = setup
    no_ent = type(batch)(**{**batch.__dict__, "entropy": None})
    m0, _ = run((policy, cfg, trainer, no_ent))
    m1, _ = run((policy, cfg, trainer, no_ent), logprob_chunk=5, shared_prefix=True, micro_batch_tokens=40)
    assert m1["actor/entropy"] == pytest.approx(m0["actor/entropy"], rel=1e-5)


def test_token_budget_bins_by_length(setup):
    """Bins hold at most micro_batch_tokens padded tokens, and each is cut to its own longest row."""
    _, cfg, _, batch = setup
    a = OmegaConf.merge(cfg.algo, {**PLAIN, "micro_batch_tokens": 60})
    mbs = micro_batches(batch, a, "cpu")
    rows = torch.cat([mb.rows for mb in mbs])
    assert sorted(rows.tolist()) == list(range(len(batch)))  # every row exactly once
    for mb in mbs:
        n, width = mb.ids.shape
        assert n == 1 or n * width <= 60  # a row longer than the budget stays whole
        assert mb.attn[:, 0].any() and mb.attn[:, -1].any()  # no column is padding in every row
    plain = len(batch) * batch.input_ids.shape[1]
    assert sum(mb.ids.numel() for mb in mbs) < plain  # the padding really went


def test_shared_prefix_runs_each_prompt_once(setup):
    _, cfg, _, batch = setup
    a = OmegaConf.merge(cfg.algo, {**PLAIN, "shared_prefix": True, "micro_batch_size": 8})
    mbs = micro_batches(batch, a, "cpu")
    assert [mb.prompt_ids.shape[0] for mb in mbs] == [2, 2, 1]  # 5 groups of 4 rows, 8 rows per micro-batch
    assert all(int(mb.repeats.sum()) == len(mb.rows) for mb in mbs)


def test_shared_prefix_refuses_gradient_checkpointing(setup):
    from rlx.algo.micro_batches import forward_logprobs
    from rlx.models.forward import causal_lm

    policy, cfg, _, batch = setup
    a = OmegaConf.merge(cfg.algo, {**PLAIN, "shared_prefix": True})
    mb = micro_batches(batch, a, "cpu")[0]
    lm = causal_lm(policy)
    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy.train()
    try:
        with pytest.raises(ValueError, match="gradient_checkpointing"):
            forward_logprobs(policy, mb, 1.0, False, 0)
    finally:
        lm.gradient_checkpointing_disable()
        policy.eval()


def test_zero_advantage_rows_run_forward_only(setup):
    """Rows of zero-variance groups (advantage 0, no KL) skip the backward: same update, same metrics."""
    policy, cfg, trainer, batch = setup
    a = OmegaConf.merge(cfg.algo, {**PLAIN, "micro_batch_tokens": 60})
    frozen = torch.zeros(len(batch), dtype=torch.bool)
    frozen[4:12] = True  # groups 1 and 2
    mbs = micro_batches(batch, a, "cpu", frozen=frozen)
    assert {int(r) for mb in mbs if not mb.grad for r in mb.rows} == set(range(4, 12))
    assert all(not bool(frozen[mb.rows].any()) for mb in mbs if mb.grad)


@pytest.mark.parametrize("rewards_of", ["two_flat_groups", "all_flat"])
def test_forward_only_zero_advantage_is_the_same_update(setup, rewards_of):
    policy, cfg, trainer, batch = setup
    rewards = torch.arange(len(batch), dtype=torch.float32) % 3
    if rewards_of == "all_flat":  # no gradient at all: AdamW must still take its (momentum) step
        rewards = torch.ones(len(batch))
    else:
        rewards[4:12] = 1.0  # groups 1 and 2 are zero-variance
    outs = []
    for skip in (False, True):
        c = OmegaConf.merge(cfg, {"algo": {**PLAIN, "micro_batch_tokens": 60, "aggregation": "token",
                                           "forward_only_zero_adv": skip}, "rollout": {"max_new_tokens": 12}})
        params = [p for p in policy.parameters() if p.requires_grad]
        saved = [p.detach().clone() for p in params]
        opt = torch.optim.AdamW(params, lr=1e-2)
        for q in params:  # a previous step's momentum, so that a zero-gradient step still moves the weights
            opt.state[q] = {"step": torch.tensor(1.0), "exp_avg": torch.full_like(q, 1e-3), "exp_avg_sq": torch.full_like(q, 1e-6)}
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        m, _ = Update.from_config(c, trainer, sched)(policy, opt, Shaped(batch, rewards), None, 1)
        outs.append((m, [p.detach() - s for p, s in zip(params, saved)]))
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
    (m0, d0), (m1, d1) = outs
    assert any(x.abs().max() > 0 for x in d0)
    err = torch.cat([(b - a).flatten() for a, b in zip(d0, d1)]).norm() / torch.cat([a.flatten() for a in d0]).norm()
    assert err <= 1e-5, err
    for k in ("actor/pg_loss", "actor/ratio/mean", "rollout/logprob_diff/mean", "actor/grad_norm", "actor/clip_frac"):
        assert m1[k] == pytest.approx(m0[k], rel=1e-5, abs=1e-7), k
