"""Every algo option runs end-to-end in the (tiny) default experiment through the real loop."""

import pytest

from tests.conftest import compose, read_metrics, run_tiny

EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60",
        "train.steps=2", "train.eval_every=2", "train.ckpt_every=2"]


@pytest.mark.integration
@pytest.mark.parametrize("algo", ["grpo", "dapo", "dr_grpo", "cispo", "gspo", "scalerl"])
def test_algo_option_runs(algo, tmp_path):
    s = run_tiny(tmp_path, EASY + [f"algo={algo}"])
    assert s["status"] == "finished"
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows[1:]:
        assert "train/frac_reward_zero_std" in r
        if r["train/num_sequences"] > 0:
            for k in ("actor/pg_loss", "actor/clip_frac/low", "actor/clip_frac/high", "actor/ratio/mean",
                      "actor/ratio/max", "actor/grad_norm"):
                assert k in r, (algo, k)
    if algo == "dapo":
        assert all("train/dynamic_sampling/rounds" in r for r in rows[1:])
    if algo == "scalerl":
        assert all("train/dropped_groups" in r and "train/retired_prompts" in r for r in rows[1:])


def test_scalerl_preset_is_the_paper_recipe():
    a = compose(["algo=scalerl"]).algo
    assert (a.loss, a.aggregation, a.adv_norm) == ("cispo", "prompt", "batch")
    assert a.zero_variance_filter and a.no_positive_resampling and a.fp32_lm_head
    assert not a.dynamic_sampling and a.beta == 0


def test_scalerl_experiment_adds_the_generation_side_and_the_algo_preset_sets_only_algo():
    from pathlib import Path

    from omegaconf import OmegaConf

    preset = OmegaConf.load(Path(__file__).parents[2] / "conf" / "algo" / "scalerl.yaml")
    assert "rollout" not in preset and preset.name == "scalerl"  # conf/algo/*.yaml sets only algo.*
    whole, loss_side = compose(["experiment=scalerl"]), compose(["algo=scalerl"])
    assert whole.algo == loss_side.algo
    r = whole.rollout  # PipelineRL-8 with forced length interruption
    assert (r.mode, r.max_staleness, r.interrupt.enabled) == ("async", 8, True)
    assert loss_side.rollout == compose([]).rollout  # the loss side alone leaves generation as it was


@pytest.mark.integration
def test_kl_to_reference_runs_with_disabled_adapters(tmp_path):
    """beta > 0: the reference is the same model with adapters disabled; actor/kl is logged."""
    run_tiny(tmp_path, EASY + ["algo.beta=0.05", "algo.mu=2"])
    rows = [r for r in read_metrics(tmp_path)[1:] if r["train/num_sequences"] > 0]
    assert rows and all("actor/kl" in r for r in rows)
