"""conf/algo presets: each validates against AlgoConfig, and each trains a toy policy end to end.

The toy loop below mirrors one RL step of rlx/train.py at the algo boundary (rollout -> shaping ->
advantages -> full-batch weights -> mu x micro-batch losses), on a policy of free per-position logits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rlx.algo import (
    AlgoConfig,
    PassRateCurriculum,
    check_config,
    compute_advantages,
    mask_truncated,
    overlong_penalty,
    policy_loss,
    token_weights,
    zero_variance_groups,
)

CONF = Path(__file__).resolve().parents[2] / "conf" / "algo"
PRESETS = ["grpo", "dapo", "dr_grpo", "cispo", "gspo", "scalerl"]


def load_preset(name: str) -> AlgoConfig:
    merged = OmegaConf.merge(OmegaConf.structured(AlgoConfig), OmegaConf.load(CONF / f"{name}.yaml"))
    return OmegaConf.to_object(merged)


def test_every_preset_file_exists():
    assert set(PRESETS) <= {p.stem for p in CONF.glob("*.yaml")}


@pytest.mark.parametrize("name", PRESETS)
def test_preset_is_valid(name):
    cfg = load_preset(name)
    assert cfg.name == name
    check_config(cfg)


def test_grpo_is_plain_grpo():
    cfg = load_preset("grpo")
    assert (cfg.loss, cfg.eps_low, cfg.eps_high, cfg.aggregation, cfg.adv_norm, cfg.beta) == (
        "ppo_clip", 0.2, 0.2, "sample", "group", 0.0,
    )
    assert not (cfg.dynamic_sampling or cfg.zero_variance_filter or cfg.no_positive_resampling or cfg.overlong_shaping)


def test_scalerl_recipe():
    cfg = load_preset("scalerl")
    assert (cfg.loss, cfg.aggregation, cfg.adv_norm) == ("cispo", "prompt", "batch")
    assert cfg.zero_variance_filter and not cfg.dynamic_sampling
    assert cfg.no_positive_resampling and cfg.pass_rate_threshold == 0.9
    assert cfg.fp32_lm_head and cfg.beta == 0.0


def test_dapo_and_dr_grpo_recipes():
    dapo, dr = load_preset("dapo"), load_preset("dr_grpo")
    assert (dapo.eps_low, dapo.eps_high, dapo.aggregation) == (0.2, 0.28, "token")
    assert dapo.dynamic_sampling and dapo.overlong_shaping
    assert (dr.aggregation, dr.adv_norm) == ("constant", "none")


# ---------------------------------------------------------------- toy end-to-end training
PROMPTS, GROUP_SIZE, T, V = 6, 8, 5, 4
EOS = V - 1


def _rollout(logits: torch.Tensor, prompt_ids: torch.Tensor, gen: torch.Generator):
    """Sample GROUP_SIZE completions per prompt from per-position logits [P, T, V]."""
    prompt_ids = prompt_ids.repeat_interleave(GROUP_SIZE)  # [N]
    probs = torch.softmax(logits[prompt_ids], -1)  # [N, T, V]
    tokens = torch.multinomial(probs.reshape(-1, V), 1, generator=gen).view(len(prompt_ids), T)  # [N, T]
    is_eos = tokens == EOS
    ended_before = torch.cumsum(is_eos.long(), -1) - is_eos.long()  # EOS strictly before t
    mask = (ended_before == 0).float()  # completion runs through its EOS
    lengths = mask.sum(-1)
    truncated = ~is_eos.any(-1)
    target = (prompt_ids % EOS).unsqueeze(-1)
    hits = ((tokens == target).float() * mask).sum(-1)
    rewards = hits / T  # fraction of the budget spent on the prompt's target token
    return prompt_ids, tokens, mask, lengths, truncated, rewards


def _logp(logits, prompt_ids, tokens):
    return torch.log_softmax(logits[prompt_ids], -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [N, T]


def _train(cfg: AlgoConfig, steps: int = 30, seed: int = 0) -> tuple[float, float, dict]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.zeros(PROMPTS, T, V, requires_grad=True)
    ref_logits = logits.detach().clone()
    opt = torch.optim.Adam([logits], lr=0.1)
    curriculum = PassRateCurriculum(cfg.pass_rate_threshold)
    counts = {"dropped": 0, "refilled": 0}
    first = last = None
    for _ in range(steps):
        active = torch.tensor([p for p in range(PROMPTS) if not curriculum.is_retired(str(p))])
        if len(active) == 0:
            break
        with torch.no_grad():
            prompt_ids, tokens, mask, lengths, truncated, rewards = _rollout(logits, active, gen)
        first = rewards.mean().item() if first is None else first
        last = rewards.mean().item()
        if cfg.no_positive_resampling:
            pass_rates = (rewards >= 0.4).float().view(-1, GROUP_SIZE).mean(-1)
            curriculum.update([str(p) for p in active.tolist()], pass_rates.tolist())
        if cfg.overlong_shaping:
            rewards = rewards + overlong_penalty(lengths, cfg, T)
        dead = zero_variance_groups(rewards, prompt_ids)
        for _round in range(cfg.max_resample_rounds if cfg.dynamic_sampling else 0):
            if not dead.any():
                break
            redo = prompt_ids[dead].unique()
            with torch.no_grad():
                new = _rollout(logits, redo, gen)
            new_rewards = new[5] + (overlong_penalty(new[3], cfg, T) if cfg.overlong_shaping else 0.0)
            keep = ~dead
            prompt_ids, tokens, mask, lengths, truncated = (
                torch.cat([a[keep], b]) for a, b in zip((prompt_ids, tokens, mask, lengths, truncated), new[:5])
            )
            rewards = torch.cat([rewards[keep], new_rewards])
            counts["refilled"] += len(redo)
            dead = zero_variance_groups(rewards, prompt_ids)
        if cfg.zero_variance_filter or cfg.dynamic_sampling:
            counts["dropped"] += int(dead.sum()) // GROUP_SIZE
            keep = ~dead
            prompt_ids, tokens, mask, truncated, rewards = (x[keep] for x in (prompt_ids, tokens, mask, truncated, rewards))
            if len(rewards) == 0:
                continue
        if cfg.mask_truncated:
            mask = mask_truncated(mask, truncated)
        adv = compute_advantages(rewards, prompt_ids, cfg)  # [N]
        weights = token_weights(mask, prompt_ids, cfg, T)  # [N, T], full batch
        with torch.no_grad():
            old_logp = _logp(logits, prompt_ids, tokens)
            ref_logp = _logp(ref_logits, prompt_ids, tokens)
        for _mu in range(cfg.mu):
            opt.zero_grad()
            for rows in torch.arange(len(adv)).split(cfg.micro_batch_size):
                logp = _logp(logits, prompt_ids[rows], tokens[rows])
                loss, _ = policy_loss(logp, old_logp[rows], adv[rows], weights[rows], mask[rows], cfg, ref_logp[rows])
                loss.backward()
            opt.step()
    counts["retired"] = len(curriculum)
    return first, last, counts


@pytest.mark.parametrize("name", PRESETS)
def test_preset_trains_toy_policy(name):
    cfg = load_preset(name)
    cfg.mu, cfg.micro_batch_size = 2, 16
    cfg.overlong_cache = 1  # the toy budget is T = 5 tokens: soft punishment only on the last one
    first, last, counts = _train(cfg, steps=30)
    assert last > first + 0.2, f"{name}: mean reward {first:.3f} -> {last:.3f}"
    if name == "scalerl":
        assert counts["retired"] > 0  # solved prompts leave the pool
    if name == "dapo":
        assert counts["refilled"] > 0


def test_kl_penalty_trains_and_holds_policy_near_reference():
    free = load_preset("grpo")
    tied = load_preset("grpo")
    tied.beta = 1.0
    _, last_free, _ = _train(free, seed=1)
    first, last_tied, _ = _train(tied, seed=1)
    assert last_tied > first  # still learns
    assert last_tied < last_free  # but the KL term slows it
