"""Aggregation weights pinned by hand; micro-batch split (1, 2, 4) leaves loss and gradient unchanged."""

from __future__ import annotations

import pytest
import torch

from rlx.algo import AlgoConfig, policy_loss, token_weights
from rlx.algo.aggregation import AGGREGATIONS
from rlx.algo.losses import LOSSES

# lengths 3, 1 (prompt 0: 4 tokens) and 2, 2, 2 (prompt 1: 6 tokens); N = 5, P = 2, 10 tokens in all
LENGTHS = [3, 1, 2, 2, 2]
GROUP = torch.tensor([0, 0, 1, 1, 1])
MASK = (torch.arange(3).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(-1)).float()  # [5, 3]
MAX_NEW_TOKENS = 4

EXPECTED_ROW_WEIGHT = {
    "token": [1 / 10] * 5,
    "sample": [1 / 15, 1 / 5, 1 / 10, 1 / 10, 1 / 10],  # 1 / (N * len_i)
    "prompt": [1 / 8, 1 / 8, 1 / 12, 1 / 12, 1 / 12],  # 1 / (P * tokens of the prompt)
    "constant": [1 / 20] * 5,  # 1 / (N * max_new_tokens)
}


@pytest.mark.parametrize("aggregation", list(EXPECTED_ROW_WEIGHT))
def test_weights_hand_values(aggregation):
    weights = token_weights(MASK, GROUP, AlgoConfig(aggregation=aggregation), MAX_NEW_TOKENS)
    expected = torch.tensor(EXPECTED_ROW_WEIGHT[aggregation]).unsqueeze(-1) * MASK
    torch.testing.assert_close(weights, expected)


def test_prompt_aggregation_loss_and_grad_hand_values():
    """ratio 1 (logp == old): per-token PPO loss is -A, so loss = -sum_i A_i len_i / (P tokens_g(i))."""
    adv = torch.tensor([1.0, -1.0, 3.0, 0.0, -1.0])
    logp = torch.full((5, 3), -1.0, requires_grad=True)
    cfg = AlgoConfig(loss="ppo_clip", aggregation="prompt")
    weights = token_weights(MASK, GROUP, cfg, MAX_NEW_TOKENS)
    loss, _ = policy_loss(logp, logp.detach(), adv, weights, MASK, cfg)
    loss.backward()
    # prompt 0: -(1*3 - 1*1)/8 = -1/4 ; prompt 1: -(3*2 + 0 - 1*2)/12 = -1/3
    assert loss.item() == pytest.approx(-1 / 4 - 1 / 3, rel=1e-6)
    expected_grad = -adv.unsqueeze(-1) * torch.tensor(EXPECTED_ROW_WEIGHT["prompt"]).unsqueeze(-1) * MASK
    torch.testing.assert_close(logp.grad, expected_grad)


def test_fully_masked_row_counts_in_n_but_gets_no_weight():
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    weights = token_weights(mask, torch.tensor([0, 0]), AlgoConfig(aggregation="sample"), 2)
    torch.testing.assert_close(weights, torch.tensor([[0.25, 0.25], [0.0, 0.0]]))


def test_bad_aggregation_raises():
    with pytest.raises(ValueError, match="algo.aggregation 'seq-mean-token-sum'"):  # the config refuses it
        AlgoConfig(aggregation="seq-mean-token-sum")
    with pytest.raises(ValueError, match="max_new_tokens"):
        token_weights(MASK, GROUP, AlgoConfig(aggregation="constant"), 0)


def _split_loss(batch, cfg, splits: int):
    logp = batch.logp.clone().requires_grad_(True)
    weights = token_weights(batch.mask, batch.group, cfg, max_new_tokens=9)
    total = torch.zeros(())
    for rows in torch.arange(len(logp)).chunk(splits):
        loss, _ = policy_loss(
            logp[rows], batch.old_logp[rows], batch.adv[rows], weights[rows], batch.mask[rows], cfg, batch.ref_logp[rows]
        )
        loss.backward()
        total = total + loss.detach()
    return total, logp.grad


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_micro_batch_split_invariance(loss, aggregation, beta, make_random_batch):
    """10 rows split into 1, 2 and 4 micro-batches (4 splits unevenly: 3, 3, 3, 1)."""
    batch = make_random_batch(n=10, t=8, group_size=5, seed=3)
    cfg = AlgoConfig(loss=loss, aggregation=aggregation, beta=beta, eps_max=1.2, gspo_eps_low=3e-3, gspo_eps_high=4e-3)
    ref_loss, ref_grad = _split_loss(batch, cfg, 1)
    assert ref_grad.abs().sum() > 0
    for splits in (2, 4):
        loss_value, grad = _split_loss(batch, cfg, splits)
        assert loss_value.item() == pytest.approx(ref_loss.item(), rel=1e-5, abs=1e-7)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-8)
