"""algo.correction: hand values of every level x action, the on-policy identity, the mismatch metrics."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from omegaconf import OmegaConf

from rlx.algo import AlgoConfig, CorrectionConfig, check_config, correction_weights, mismatch_metrics, policy_loss
from rlx.algo.aggregation import token_weights

L = math.log
# trainer-minus-engine token log-ratios of three rows (row B and row C have 2 tokens, then padding):
#   A: rho_t = 2, 1, 4     product 8      geometric mean 2
#   B: rho_t = 0.5, 0.25   product 0.125  geometric mean sqrt(0.125) = 0.35355
#   C: rho_t = 2, 0.75     product 1.5    geometric mean sqrt(1.5) = 1.22474
DELTA = torch.tensor([[L(2), 0.0, L(4)], [L(0.5), L(0.25), 0.0], [L(2), L(0.75), 0.0]])
MASK = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 1, 0]])
ROLLOUT = torch.tensor([[-1.0, -2.0, -0.5], [-0.7, -1.1, -3.0], [-2.2, -0.3, -9.0]])
CAP, LO, HI = 1.5, 0.3, 3.0
G, S = math.sqrt(0.125), math.sqrt(1.5)
EXPECTED = {  # weights of the valid tokens, row by row (cap 1.5, kept range [0.3, 3])
    # token: truncate min(rho, 1.5); mask: rho 4 > 3 and rho 0.25 < 0.3 go; both: the two in a row
    ("token", "truncate"): [[1.5, 1.0, 1.5], [0.5, 0.25], [1.5, 0.75]],
    ("token", "mask"): [[2.0, 1.0, 0.0], [0.5, 0.0], [2.0, 0.75]],
    ("token", "both"): [[1.5, 1.0, 0.0], [0.5, 0.0], [1.5, 0.75]],
    # sequence: A's 8 truncates to 1.5 or is masked (> 3), B's 0.125 is kept by truncation, masked (< 0.3)
    ("sequence", "truncate"): [[1.5] * 3, [0.125] * 2, [1.5] * 2],
    ("sequence", "mask"): [[0.0] * 3, [0.0] * 2, [1.5] * 2],
    ("sequence", "both"): [[0.0] * 3, [0.0] * 2, [1.5] * 2],
    # geometric: A's 2 truncates to 1.5 and is kept by the mask; B's 0.354 and C's 1.225 pass both
    ("geometric", "truncate"): [[1.5] * 3, [G] * 2, [S] * 2],
    ("geometric", "mask"): [[2.0] * 3, [G] * 2, [S] * 2],
    ("geometric", "both"): [[1.5] * 3, [G] * 2, [S] * 2],
}


def _corr(level: str, action: str) -> CorrectionConfig:
    return CorrectionConfig(level=level, action=action, cap=CAP, lo=LO, hi=HI)


@pytest.mark.parametrize("level,action", sorted(EXPECTED))
def test_correction_weights_hand_values(level, action):
    w = correction_weights(ROLLOUT + DELTA, ROLLOUT, MASK, _corr(level, action))
    got = [w.weight[i, : int(MASK[i].sum())].tolist() for i in range(3)]
    for g, e in zip(got, EXPECTED[(level, action)]):
        assert g == pytest.approx(e, rel=1e-5)


def test_sequence_mask_in_the_loss_hand_values():
    """Sequence mask through policy_loss: ratio 1 (trainer == old), A = 1, token aggregation over the
    7 tokens: only row C's 2 tokens count, each -1.5 * 1; loss = -(1.5 + 1.5) / 7 and each of C's
    tokens has gradient -1.5 / 7, A's and B's 0."""
    cfg = AlgoConfig(aggregation="token")
    logp = (ROLLOUT + DELTA).clone().requires_grad_(True)
    w = correction_weights(logp.detach(), ROLLOUT, MASK, _corr("sequence", "mask")).weight
    weights = token_weights(MASK, torch.zeros(3, dtype=torch.long), cfg, 3)
    loss, m = policy_loss(logp, logp.detach(), torch.ones(3), weights, MASK, cfg, is_weight=w)
    loss.backward()
    assert loss.item() == pytest.approx(-3.0 / 7, rel=1e-6)
    want = torch.tensor([[0.0, 0, 0], [0, 0, 0], [-1.5 / 7, -1.5 / 7, 0]])
    torch.testing.assert_close(logp.grad, want)


@pytest.mark.parametrize("level,action", sorted(EXPECTED))
@pytest.mark.parametrize("loss_name", ["ppo_clip", "cispo", "gspo"])
def test_equal_numerics_is_the_identity(level, action, loss_name):
    """trainer == engine (rho = 1 everywhere): every correction leaves the loss and gradient bit-identical."""
    g = torch.Generator().manual_seed(0)
    logp0 = -3 * torch.rand(4, 5, generator=g)
    old = logp0 - 0.1 * torch.randn(4, 5, generator=g)  # an update already moved the policy: ratios != 1
    mask = (torch.arange(5) < torch.tensor([[5], [3], [1], [4]])).float()
    adv = torch.randn(4, generator=g)
    cfg = AlgoConfig(loss=loss_name, aggregation="token")
    weights = token_weights(mask, torch.tensor([0, 0, 1, 1]), cfg, 5)
    w = correction_weights(old, old, mask, _corr(level, action)).weight  # first_logp == rollout_logp
    a = logp0.clone().requires_grad_(True)
    b = logp0.clone().requires_grad_(True)
    la, _ = policy_loss(a, old, adv, weights, mask, cfg, is_weight=w)
    lb, _ = policy_loss(b, old, adv, weights, mask, cfg)
    la.backward()
    lb.backward()
    assert la.item() == lb.item()
    assert torch.equal(a.grad, b.grad)


def test_mismatch_metrics_hand_values():
    """rho_t = 2, 1, 4 | 0.5, 0.25 | 2, 0.75 (7 tokens); their product 8 * 0.125 * 1.5 = 1.5.
    k1 = -mean log rho = -ln(1.5) / 7; k3 = mean(rho - 1 - ln rho) = (10.5 - 7 - ln 1.5) / 7.
    Sequence log-ratios ln 8, ln 0.125, ln 1.5: k1_seq = -(ln 1.5) / 3, k3_seq = sum(R - 1 - ln R) / 3,
    median ln 1.5, p25 = (ln 0.125 + ln 1.5) / 2 (linear). Sequence mask: A and B go (5 of 7 tokens, 2 of 3 rows)."""
    m = mismatch_metrics(ROLLOUT + DELTA, ROLLOUT, MASK, _corr("sequence", "mask"))
    assert m["rollout_corr/kl"] == pytest.approx(-L(1.5) / 7, rel=1e-5)
    assert m["rollout_corr/k3_kl"] == pytest.approx((10.5 - 7 - L(1.5)) / 7, rel=1e-5)
    assert m["rollout_corr/kl_seq"] == pytest.approx(-L(1.5) / 3, rel=1e-5)
    k3_seq = sum(r - 1 - L(r) for r in (8, 0.125, 1.5)) / 3
    assert m["rollout_corr/k3_kl_seq"] == pytest.approx(k3_seq, rel=1e-5)
    assert m["rollout_corr/seq_log_ratio/p50"] == pytest.approx(L(1.5), rel=1e-5)
    assert m["rollout_corr/seq_log_ratio/p25"] == pytest.approx((L(0.125) + L(1.5)) / 2, rel=1e-5)
    assert m["rollout_corr/seq_log_ratio/min"] == pytest.approx(L(0.125), rel=1e-5)
    assert m["rollout_corr/seq_log_ratio/max"] == pytest.approx(L(8), rel=1e-5)
    assert m["rollout_corr/rollout_is_masked_fraction"] == pytest.approx(5 / 7)
    assert m["rollout_corr/rollout_is_seq_masked_fraction"] == pytest.approx(2 / 3)
    # rho at the sequence level over tokens: 8 x3, 0.125 x2, 1.5 x2; the applied weights 0 x5, 1.5 x2
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx((24 + 0.25 + 3) / 7, rel=1e-5)
    assert m["rollout_corr/rollout_is_max"] == pytest.approx(8, rel=1e-5)
    assert m["rollout_corr/weight_mean"] == pytest.approx(3 / 7, rel=1e-5)
    assert m["sampling/importance_sampling_ratio/max"] == pytest.approx(1.5, rel=1e-5)
    assert m["sampling/sampling_logp_difference/max"] == pytest.approx(L(4), rel=1e-5)


def test_metrics_without_correction_measure_and_apply_nothing():
    """Off: the KL and quantiles are the same measurements, token rho is reported, the weights are 1."""
    off = mismatch_metrics(ROLLOUT + DELTA, ROLLOUT, MASK, None)
    on = mismatch_metrics(ROLLOUT + DELTA, ROLLOUT, MASK, _corr("token", "both"))
    for k in ("rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/kl_seq", "rollout_corr/seq_log_ratio/p95"):
        assert off[k] == on[k]
    assert off["rollout_corr/rollout_is_max"] == pytest.approx(4.0, rel=1e-5)  # token rho, untruncated
    assert off["rollout_corr/weight_mean"] == 1.0 and off["rollout_corr/rollout_is_masked_fraction"] == 0.0
    assert on["rollout_corr/rollout_is_masked_fraction"] == pytest.approx(2 / 7)  # rho 4 and 0.25
    assert on["rollout_corr/truncated_fraction"] == pytest.approx(3 / 7)  # rho 2, 4, 2 above 1.5


def test_tis_cap_is_the_token_truncate_case():
    from rlx.algo.correction import resolve

    assert resolve(AlgoConfig()) is None
    assert resolve(AlgoConfig(tis_cap=3.0)) == CorrectionConfig(level="token", action="truncate", cap=3.0)
    first = ROLLOUT + DELTA
    w = correction_weights(first, ROLLOUT, torch.ones_like(MASK), resolve(AlgoConfig(tis_cap=3.0))).weight
    assert torch.equal(w, torch.exp(first - ROLLOUT).clamp(max=3.0))  # the former TIS expression, bit for bit


@pytest.mark.parametrize("bad,key", [
    ({"correction": CorrectionConfig(level="seq")}, "algo.correction.level"),
    ({"correction": CorrectionConfig(level="token", action="drop")}, "algo.correction.action"),
    ({"correction": CorrectionConfig(level="token", cap=0.5)}, "algo.correction.cap"),
    ({"correction": CorrectionConfig(level="token", cap=math.inf)}, "algo.correction.cap"),
    ({"correction": CorrectionConfig(level="token", lo=1.5)}, "algo.correction.lo"),
    ({"correction": CorrectionConfig(level="token", hi=math.nan)}, "algo.correction.hi"),
    ({"correction": CorrectionConfig(level="token"), "tis_cap": 2.0}, "algo.tis_cap"),
    ({"mismatch_split_every": -1}, "algo.mismatch_split_every"),
])
def test_bad_correction_config_names_the_key(bad, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        check_config(AlgoConfig(**bad))


# ---------------------------------------------------------------- through rlx.algo.Update


from tests.algo.test_algo_update import setup  # noqa: E402,F401  (the tiny LoRA policy and one sampled batch)


def _merged(cfg, **algo):
    return OmegaConf.merge(cfg, {"algo": {"micro_batch_size": 5, "aggregation": "token", **algo},
                                 "rollout": {"max_new_tokens": 10}})


def _update(policy, cfg, trainer, batch, **algo):
    from rlx.algo import Shaped, Update

    cfg = _merged(cfg, **algo)
    params = [p for p in policy.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    rewards = torch.arange(len(batch), dtype=torch.float32) % 3
    m, _ = Update.from_config(cfg, trainer, sched)(policy, opt, Shaped(batch, rewards), None, 1)
    delta = [p.detach() - s for p, s in zip(params, saved)]
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)
    return m, delta


def test_update_identity_and_effect(setup):
    """Behaviour log-probs set to the trainer's own: every combination updates exactly as no correction.
    With the engine's log-probs shifted on one row, a sequence mask that drops it changes the update."""
    policy, cfg, trainer, batch = setup
    from rlx.algo.mismatch import trainer_logprobs

    own = trainer_logprobs(policy, batch, _merged(cfg), trainer)  # the update's own micro-batched forward
    exact = replace(batch, logprobs=own * batch.completion_mask)
    m0, d0 = _update(policy, cfg, trainer, exact)
    assert m0["rollout/logprob_diff/max"] == 0.0 and m0["rollout_corr/kl"] == 0.0
    for level, action in sorted(EXPECTED):
        m, d = _update(policy, cfg, trainer, exact, correction={"level": level, "action": action})
        assert all(torch.equal(a, b) for a, b in zip(d, d0)), (level, action)
        assert m["rollout_corr/weight_mean"] == 1.0 and m["rollout_corr/rollout_is_masked_fraction"] == 0.0
    shifted = exact.logprobs.clone()
    shifted[0] -= 1.0 * batch.completion_mask[0]  # row 0: the engine 1 nat less sure per token: rho = e^len
    m1, d1 = _update(policy, cfg, trainer, replace(exact, logprobs=shifted),
                     correction={"level": "sequence", "action": "mask"})
    assert m1["rollout_corr/rollout_is_seq_masked_fraction"] == pytest.approx(1 / len(batch))
    assert max((a - b).abs().max().item() for a, b in zip(d1, d0)) > 0


def test_split_parts_add_up_to_the_total(setup):
    """A batch sampled at version 0, the trainer moved on to version 1 (LoRA B shifted): the engine part
    is pi_0 - mu (float noise of the hf engine), the staleness part pi_1 - pi_0 (not small), and
    engine + staleness = total = pi_1 - mu token by token within 1e-5."""
    from rlx.algo.mismatch import mismatch_split, split_parts, trainer_logprobs
    from rlx.models.trainable import load_trainable, trainable_state

    policy, cfg, trainer, batch = setup
    cfg = _merged(cfg)
    assert int(batch.token_version.max()) == 0
    v0 = trainable_state(policy)
    pi0 = trainer_logprobs(policy, batch, cfg, trainer)
    with torch.no_grad():
        for n, q in policy.named_parameters():
            if "lora_B" in n:
                q.add_(0.3 * torch.randn(q.shape, generator=torch.Generator().manual_seed(3)))
    try:
        v1 = trainable_state(policy)
        parts = split_parts(policy, batch, cfg, trainer, 1, {0: v0})
        valid = batch.completion_mask.bool()
        torch.testing.assert_close(parts["engine"] + parts["staleness"], parts["total"], rtol=0, atol=1e-5)
        assert torch.equal(parts["engine"][valid], (pi0 - batch.logprobs)[valid])
        assert parts["engine"][valid].abs().max() < 1e-4 < parts["staleness"][valid].abs().mean()
        assert all(torch.equal(q, v1[n]) for n, q in trainable_state(policy).items())  # current weights restored
        m = mismatch_split(policy, batch, cfg, trainer, 1, {0: v0})
        k1 = m["rollout_corr/split/engine/kl"] + m["rollout_corr/split/staleness/kl"]
        assert k1 == pytest.approx(m["rollout_corr/split/total/kl"], abs=1e-5)
        assert mismatch_split(policy, batch, cfg, trainer, 1, {}) == {"rollout_corr/split/missing_versions": 1.0}
        # on-policy (the batch's version is the current one): no staleness, engine = total
        same = split_parts(policy, batch, cfg, trainer, 0, {})
        assert torch.equal(same["staleness"], torch.zeros_like(same["staleness"]))
    finally:
        load_trainable(policy, v0)


def test_k3_is_non_negative_at_float_noise():
    """Log-ratios of 1e-7 (hf fp32 engine vs trainer): k3 = d^2/2 = 5e-15, not float32 cancellation noise."""
    d = torch.tensor([[1e-7, -1e-7, 3e-8]])
    m = mismatch_metrics(d, torch.zeros_like(d), torch.ones_like(d), None)
    assert m["rollout_corr/k3_kl"] == pytest.approx((1e-14 + 1e-14 + 9e-16) / 2 / 3, rel=1e-3)
    assert m["rollout_corr/k3_kl_seq"] == pytest.approx((3e-8) ** 2 / 2, rel=1e-3)
