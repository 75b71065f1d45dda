"""conf/algo presets: each validates against AlgoConfig, and each trains a policy through the real loop.

The training runs below compose the real Hydra config at tiny size and train it with `rlx.train.run`
(generate -> score -> shape -> update -> sync, step after step): no second RL loop here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlx.algo import AlgoConfig, check_config
from tests.conftest import TINY, compose, read_metrics

CONF = Path(__file__).resolve().parents[2] / "conf" / "algo"
PRESETS = ["grpo", "dapo", "dr_grpo", "cispo", "gspo", "scalerl"]


def load_preset(name: str) -> AlgoConfig:
    raw = OmegaConf.load(CONF / f"{name}.yaml")
    if "algo" in raw:  # a `# @package _global_` preset that also sets the generation side (scalerl)
        raw = raw.algo
    merged = OmegaConf.merge(OmegaConf.structured(AlgoConfig), raw)
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


# ---------------------------------------------------------------- end-to-end training, real loop
# A task the tiny SFT base half solves (a + b and a - b, operands <= 5; 60 training prompts, enough that
# ScaleRL's retirement does not empty the pool in STEPS steps) and a base built in 250 SFT steps, cached
# once per session. Half of its demonstrations write "x=" before the answer, which the verifier rejects
# (conf/model/tiny.yaml), so RL has a habit to unlearn and the reward rises within a few dozen steps.
# 8 prompts x 8 completions per step; mu = 2 passes over 16-row micro-batches, so the second pass is
# off-policy and each loss's clip / cap is in play (the presets' own mu is 1).
EASY = ["task.num_terms=2", "task.max_operand=5", "task.n_train=60", "task.n_eval=8",
        "model.sft.steps=250", "model.sft.lr=1e-2",
        "rollout.prompts_per_step=8", "rollout.group_size=8", "algo.mu=2", "algo.micro_batch_size=16"]
STEPS, WINDOW = 30, 5
# How far the first-window and last-window mean rewards may drift apart by sampling alone: a frozen
# policy (algo.lr=0, same sampling) moved them by at most 0.06 over seeds 0-4.
NOISE = 0.1
# What a preset must rise by: every preset rose by 0.26 to 0.37 over seeds 0-4.
MARGIN = 0.2


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    """train(*overrides) -> the metrics of steps 1..STEPS of a tiny run of the real loop (memoized per module;
    evaluated and checkpointed only at step 0 and the end, which leaves the training steps' samples as they are)."""
    from rlx.train import run

    done: dict[tuple, list[dict]] = {}

    def train_(*overrides: str) -> list[dict]:
        if overrides not in done:
            run_dir = tmp_path_factory.mktemp("run")
            last = [f"train.steps={STEPS}", f"train.eval_every={STEPS}", f"train.ckpt_every={STEPS}"]
            run(compose(TINY + EASY + list(overrides) + last), run_dir)
            done[overrides] = [r for r in read_metrics(run_dir) if r["step"] >= 1]
        return done[overrides]

    return train_


def first_last(rows: list[dict]) -> tuple[float, float]:
    """Mean task reward (the verifier's, before any shaping) over the first and the last WINDOW steps."""
    r = [m["train/rewards/correct"] for m in rows]
    return sum(r[:WINDOW]) / WINDOW, sum(r[-WINDOW:]) / WINDOW


@pytest.mark.integration
def test_frozen_policy_stays_within_noise(train):
    """The control for NOISE and MARGIN: with lr 0 the same loop samples the same way but cannot learn."""
    first, last = first_last(train("algo=grpo", "algo.lr=0"))
    assert abs(last - first) < NOISE, f"frozen policy: mean reward {first:.3f} -> {last:.3f}"


@pytest.mark.integration
@pytest.mark.parametrize("name", PRESETS)
def test_preset_trains_policy(train, name):
    rows = train(f"algo={name}")
    first, last = first_last(rows)
    assert last > first + MARGIN, f"{name}: mean reward {first:.3f} -> {last:.3f}"
    if name == "scalerl":  # no-positive-resampling retires solved prompts; zero-variance groups are dropped
        assert rows[-1]["train/retired_prompts"] > 0
        assert sum(m["train/dropped_groups"] for m in rows) > 0
    if name == "dapo":  # dynamic sampling refills zero-variance groups with fresh ones
        assert sum(m["train/dynamic_sampling/refilled_groups"] for m in rows) > 0


@pytest.mark.integration
def test_kl_penalty_trains_but_slower(train):
    """beta = 1: the k3 KL to the reference (adapters disabled) lets the policy learn, but not as far."""
    _, last_free = first_last(train("algo=grpo"))
    _, last_frozen = first_last(train("algo=grpo", "algo.lr=0"))
    rows = train("algo=grpo", "algo.beta=1.0")
    first, last_tied = first_last(rows)
    assert all("actor/kl" in m for m in rows)
    assert last_tied > last_frozen + NOISE, f"beta=1 ends at {last_tied:.3f}, a frozen policy at {last_frozen:.3f}"
    assert last_tied < last_free, f"beta=1 ends at {last_tied:.3f}, beta=0 at {last_free:.3f}"
