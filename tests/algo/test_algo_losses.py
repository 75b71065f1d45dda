"""Policy losses and metrics pinned by hand-computed values (one or two tokens at a time)."""

from __future__ import annotations

import math

import pytest
import torch

from rlx.algo import AlgoConfig, policy_loss, token_weights


def _run(logp_rows, old_rows, adv, cfg, mask=None, ref_rows=None):
    logp = torch.tensor(logp_rows, requires_grad=True)
    mask = torch.ones_like(logp) if mask is None else torch.tensor(mask)
    weights = token_weights(mask, torch.zeros(len(logp), dtype=torch.long), cfg, logp.shape[1])
    ref = None if ref_rows is None else torch.tensor(ref_rows)
    loss, metrics = policy_loss(logp, torch.tensor(old_rows), torch.tensor(adv), weights, mask, cfg, ref)
    loss.backward()
    return loss.item(), logp.grad, metrics


def test_ppo_clip_metrics_hand_values():
    """ratios 1.5, 0.5, 1 (and a masked 10); A = +1, eps 0.2: only the 1.5 token is (high-)clipped."""
    logp = [[math.log(1.5), math.log(0.5), 0.0, math.log(10.0)]]
    loss, grad, m = _run(logp, [[0.0] * 4], [1.0], AlgoConfig(aggregation="token"), mask=[[1.0, 1.0, 1.0, 0.0]])
    assert loss == pytest.approx((-1.2 - 0.5 - 1.0) / 3, rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.0, -0.5 / 3, -1.0 / 3, 0.0]]))  # d(-r)/dlogp = -r
    assert m["actor/pg_loss"] == pytest.approx(-0.9, rel=1e-6)
    assert m["actor/clip_frac/high"] == pytest.approx(1 / 3)
    assert m["actor/clip_frac/low"] == 0.0
    assert m["actor/clip_frac"] == pytest.approx(1 / 3)
    assert m["actor/ratio/mean"] == pytest.approx(1.0, rel=1e-6)
    assert m["actor/ratio/max"] == pytest.approx(1.5, rel=1e-6)  # the masked ratio 10 is ignored
    assert "actor/kl" not in m  # no reference log-probs given


def test_clip_higher_asymmetry():
    """eps_low 0.2 / eps_high 0.28: ratio 1.25 with A > 0 is inside the range, 0.75 with A < 0 is clipped."""
    cfg = AlgoConfig(eps_low=0.2, eps_high=0.28, aggregation="token")
    _, _, m = _run([[math.log(1.25)], [math.log(0.75)]], [[0.0], [0.0]], [1.0, -1.0], cfg)
    assert m["actor/clip_frac/high"] == 0.0
    assert m["actor/clip_frac/low"] == pytest.approx(0.5)


def test_cispo_hand_values():
    """ratios 2 and 1, cap 1.5, A = 1: loss = mean(-min(r, 1.5) * logp); the weight is detached."""
    cfg = AlgoConfig(loss="cispo", eps_max=1.5, aggregation="sample")
    loss, grad, m = _run([[-1.0, -2.0]], [[-1.0 - math.log(2.0), -2.0]], [1.0], cfg)
    assert loss == pytest.approx((1.5 * 1.0 + 1.0 * 2.0) / 2, rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-0.75, -0.5]]))
    assert m["actor/clip_frac/high"] == pytest.approx(0.5)  # truncation active on the ratio-2 token
    assert m["actor/clip_frac/low"] == 0.0  # CISPO has no lower clip
    assert m["actor/ratio/max"] == pytest.approx(2.0, rel=1e-6)


def test_gspo_hand_values():
    """Row 0: log-ratios 0.1, -0.3 -> s = e^-0.1 < 0.95, A = -1: clipped, loss 0.95, no gradient.
    Row 1: same s, A = +1: unclipped, loss -s, d(-s)/dlogp_t = -s / 2 per token."""
    cfg = AlgoConfig(loss="gspo", gspo_eps_low=0.05, gspo_eps_high=0.05, aggregation="sample")
    logp = [[0.1, -0.3], [0.1, -0.3]]
    loss, grad, m = _run(logp, [[0.0, 0.0], [0.0, 0.0]], [-1.0, 1.0], cfg)
    s = math.exp(-0.1)
    assert loss == pytest.approx((0.95 - s) / 2, rel=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [-s / 4, -s / 4]]))
    assert m["actor/clip_frac/low"] == pytest.approx(0.5)
    assert m["actor/ratio/mean"] == pytest.approx(s, rel=1e-6)


@pytest.mark.parametrize("kl_times_ratio,grad_per_beta", [(True, 0.5), (False, 1.0 - math.exp(-0.5))])
def test_k3_kl_hand_values(kl_times_ratio, grad_per_beta):
    """logp -1, ref -1.5, ratio 1, A = 0: k3 = e^-0.5 - 0.5; d k3/d logp = 1 - e^-0.5, and with the
    ratio factor d(k3 r)/d logp = (1 - e^-0.5) + k3 = 0.5."""
    cfg = AlgoConfig(beta=0.1, kl_times_ratio=kl_times_ratio, aggregation="token")
    loss, grad, m = _run([[-1.0]], [[-1.0]], [0.0], cfg, ref_rows=[[-1.5]])
    k3 = math.exp(-0.5) - 0.5
    assert loss == pytest.approx(0.1 * k3, rel=1e-6)
    assert m["actor/kl"] == pytest.approx(k3, rel=1e-6)
    assert grad.item() == pytest.approx(0.1 * grad_per_beta, rel=1e-6)


def test_non_finite_padding_does_not_leak():
    logp = torch.tensor([[-1.0, float("-inf")], [-0.5, float("nan")]], requires_grad=True)
    old = torch.tensor([[-1.1, float("-inf")], [-0.4, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    for loss_name in ("ppo_clip", "cispo", "gspo"):
        cfg = AlgoConfig(loss=loss_name, beta=0.1)
        weights = token_weights(mask, torch.tensor([0, 0]), cfg, 2)
        loss, m = policy_loss(logp, old, torch.tensor([1.0, -1.0]), weights, mask, cfg, ref_logp=old)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logp.grad).all(), loss_name
        assert all(math.isfinite(v) for v in m.values()), (loss_name, m)
        logp.grad = None


def test_bad_input_raises():
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match="algo.loss 'reinforce'"):  # the config refuses it, not each call
        AlgoConfig(loss="reinforce")
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, logp.detach(), torch.zeros(2), mask, mask, AlgoConfig(beta=0.1))
    with pytest.raises(ValueError, match="adv"):
        policy_loss(logp, logp.detach(), torch.zeros(3), mask, mask, AlgoConfig())
    with pytest.raises(ValueError, match="shape"):
        policy_loss(logp, logp.detach()[:, :2], torch.zeros(2), mask, mask, AlgoConfig())


def test_token_entropy_matches_torch_categorical():
    from rlx.algo import token_entropy

    logits = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(0)) * 4
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(token_entropy(logits), expected, rtol=1e-5, atol=1e-6)


def test_truncated_is_weight_hand_values():
    """TIS (algo.tis_cap): trainer == old log-probs (ratio 1), rollout log-probs put the behaviour
    probability at 1/2, 1 and 1/8 of the trainer's: weights 2, 1, min(8, C=3) = 3 scale each token's
    -r A term; the ratio and the clip metrics are those of the plain loss."""
    cfg = AlgoConfig(aggregation="token", tis_cap=3.0)
    logp = torch.tensor([[math.log(0.4), math.log(0.3), math.log(0.8)]], requires_grad=True)
    rollout = logp.detach() + torch.tensor([[math.log(0.5), 0.0, math.log(1 / 8)]])
    w = torch.exp(logp.detach() - rollout).clamp(max=cfg.tis_cap)  # [1, 3]: 2, 1, 3
    mask = torch.ones_like(logp)
    weights = token_weights(mask, torch.zeros(1, dtype=torch.long), cfg, 3)
    loss, m = policy_loss(logp, logp.detach(), torch.tensor([1.0]), weights, mask, cfg, is_weight=w)
    loss.backward()
    assert loss.item() == pytest.approx(-(2 + 1 + 3) / 3, rel=1e-6)
    torch.testing.assert_close(logp.grad, torch.tensor([[-2 / 3, -1 / 3, -1.0]]))
    assert m["actor/tis_weight/mean"] == pytest.approx(2.0) and m["actor/tis_weight/max"] == pytest.approx(3.0)
    assert m["actor/ratio/mean"] == pytest.approx(1.0)
    plain, _ = policy_loss(logp.detach(), logp.detach(), torch.tensor([1.0]), weights, mask, AlgoConfig(aggregation="token"))
    assert plain.item() == pytest.approx(-1.0)  # without TIS every token counts once


def test_tis_cap_must_be_non_negative():
    with pytest.raises(ValueError, match="algo.tis_cap"):
        AlgoConfig(tis_cap=-1.0)
