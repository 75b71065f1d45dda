"""rlx losses against TRL 1.16's own GRPOTrainer._compute_loss: loss and gradient within 1e-5 relative."""

from __future__ import annotations

import pytest
import torch

from rlx.algo import AlgoConfig, policy_loss, token_weights

RTOL = 1e-5

# TRL loss_type (+ importance_sampling_level) -> the rlx knobs that mean the same objective
CASES = {
    "grpo": dict(trl=dict(loss_type="grpo"), rlx=dict(loss="ppo_clip", aggregation="sample")),
    "bnpo": dict(trl=dict(loss_type="bnpo"), rlx=dict(loss="ppo_clip", aggregation="token")),
    "dr_grpo": dict(trl=dict(loss_type="dr_grpo"), rlx=dict(loss="ppo_clip", aggregation="constant")),
    "dapo": dict(trl=dict(loss_type="dapo"), rlx=dict(loss="ppo_clip", aggregation="token")),
    "cispo": dict(trl=dict(loss_type="cispo"), rlx=dict(loss="cispo", aggregation="token")),
    "gspo": dict(trl=dict(loss_type="grpo", sequence_level=True), rlx=dict(loss="gspo", aggregation="sample")),
}


def _eps(name: str) -> dict:
    """Clip settings, the same numbers given to TRL (epsilon, epsilon_high) and rlx."""
    if name == "cispo":  # TRL's CISPO cap is epsilon_high itself, an absolute bound on the ratio
        return dict(trl=dict(epsilon=0.2, epsilon_high=1.1), rlx=dict(eps_max=1.1))
    if name == "gspo":
        return dict(trl=dict(epsilon=3e-3, epsilon_high=4e-3), rlx=dict(gspo_eps_low=3e-3, gspo_eps_high=4e-3))
    return dict(trl=dict(epsilon=0.2, epsilon_high=0.28), rlx=dict(eps_low=0.2, eps_high=0.28))


def _rlx_loss(batch, cfg: AlgoConfig, max_new_tokens: int, micro_batches: int = 1):
    logp = batch.logp.clone().requires_grad_(True)
    weights = token_weights(batch.mask, batch.group, cfg, max_new_tokens)  # full batch, before the split
    total, metrics = torch.zeros(()), []
    for rows in torch.arange(len(logp)).chunk(micro_batches):
        loss, m = policy_loss(
            logp[rows], batch.old_logp[rows], batch.adv[rows], weights[rows], batch.mask[rows], cfg, batch.ref_logp[rows]
        )
        loss.backward()
        total, metrics = total + loss.detach(), metrics + [m]
    return total, logp.grad, metrics


def _assert_rel_close(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    err = (ours - ref).norm() / ref.norm().clamp(min=1e-30)
    assert err <= RTOL, f"{what}: relative error {err:.3e} > {RTOL}"


KL_SETTINGS = [(0.0, True), (0.04, True), (0.04, False)]


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("beta,kl_times_ratio", KL_SETTINGS)
def test_loss_and_grad_match_trl(name, beta, kl_times_ratio, make_random_batch, run_trl_loss):
    batch = make_random_batch(n=10, t=9, group_size=5, seed=len(name))
    max_new_tokens = 12  # > T so dr_grpo's constant differs from the padded width
    case, eps = CASES[name], _eps(name)
    ref_loss, ref_grad, ref_metrics = run_trl_loss(
        batch, beta=beta, bias_correction_kl=kl_times_ratio, max_completion_length=max_new_tokens,
        **case["trl"], **eps["trl"],
    )
    cfg = AlgoConfig(beta=beta, kl_times_ratio=kl_times_ratio, **case["rlx"], **eps["rlx"])
    loss, grad, metrics = _rlx_loss(batch, cfg, max_new_tokens)

    assert ref_grad.abs().sum() > 0, "degenerate case: TRL gradient is zero"
    _assert_rel_close(loss, ref_loss, f"{name} loss")
    _assert_rel_close(grad, ref_grad, f"{name} grad")
    if beta != 0.0:
        assert metrics[0]["actor/kl"] == pytest.approx(ref_metrics["kl"], rel=1e-5)
    if name not in ("cispo", "gspo"):  # same clip-fraction definitions as TRL's clip_ratio/{low,high}_mean
        assert metrics[0]["actor/clip_frac/low"] == pytest.approx(ref_metrics["clip_ratio/low_mean"], abs=1e-6)
        assert metrics[0]["actor/clip_frac/high"] == pytest.approx(ref_metrics["clip_ratio/high_mean"], abs=1e-6)
    # the random batch must exercise both the clipped (truncated) and the unclipped branch
    assert 0.0 < metrics[0]["actor/clip_frac"] < 1.0


@pytest.mark.parametrize("name", ["grpo", "dapo", "cispo"])
def test_micro_batches_match_trl_gradient_accumulation(name, make_random_batch, run_trl_loss):
    """TRL with 2 accumulation steps over one generation batch == rlx with 2 micro-batches (equal halves)."""
    batch = make_random_batch(n=8, t=6, group_size=4, seed=11)
    case, eps = CASES[name], _eps(name)
    ref_loss, ref_grad, _ = run_trl_loss(batch, beta=0.04, micro_batches=2, **case["trl"], **eps["trl"])
    cfg = AlgoConfig(beta=0.04, **case["rlx"], **eps["rlx"])
    loss, grad, _ = _rlx_loss(batch, cfg, max_new_tokens=6, micro_batches=2)
    _assert_rel_close(loss, ref_loss, f"{name} loss")
    _assert_rel_close(grad, ref_grad, f"{name} grad")
