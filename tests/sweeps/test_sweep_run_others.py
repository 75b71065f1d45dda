"""The NExt and ScaleRL sweeps, launched with their one command at smoke size, and their reports."""

from __future__ import annotations

import pytest
import yaml

from rlx import report as R
from rlx.run.records import read_metrics
from tests.sweeps.sweep_helpers import BATCH, SMOKE, job_dirs, overrides, run_sweep, summary
from tests.report.test_report import table_row
from tests.sweeps.test_sweep_configs import LOO_COMPONENT

pytestmark = pytest.mark.integration


def _recipe(cfg: dict) -> dict:
    """algo keys plus the generation side of the ScaleRL recipe, as test_sweep_configs compares them."""
    r = cfg["rollout"]
    return {**cfg["algo"], "mode": r["mode"], "max_staleness": r["max_staleness"],
            "interrupt.enabled": r["interrupt"]["enabled"]}


def metrics(job):
    return read_metrics(job)


def test_next_table_runs_every_arm_and_the_extrapolating_arms_jump(tmp_path):
    # the paper-shaped arms jump at step 30 of 50; at smoke size: records every step, jump at step 2
    run_sweep("next_table", tmp_path, SMOKE + BATCH + [
        "seed=0", "train.steps=2", "extrapolation.interval=1", "extrapolation.horizon=1",
        "extrapolation.extend_at=[2]", "extrapolation.epochs=20", "extrapolation.hidden=16"])
    jobs = {overrides(j)["next_arm"]: j for j in job_dirs(tmp_path)}
    assert list(jobs) == ["none_n", "none_long", "linear", "next"]
    for arm, job in jobs.items():
        assert summary(job)["status"] == "finished", arm
        last = metrics(job)[-1]
        if arm in ("linear", "next"):
            assert last["extrap/jumps"] == 1 and last["extrap/steps_saved"] > 0, arm
        else:
            assert not any(k.startswith("extrap/") for k in last), arm
    assert "extrap/predictor_loss_first" in metrics(jobs["next"])[-1]  # the predictor was trained
    md, pngs = R.build_report(tmp_path)
    for label in ("backbone (no RL, step 0)", "GRPO-LoRA, N steps", "GRPO-LoRA, 1.6N steps",
                  "linear extrapolation (RL-Extra)", "NExt predict-extend"):
        assert table_row(md, label)
    assert table_row(md, "NExt predict-extend")[7] == "24.2 (250 steps)"
    assert [p.name for p in pngs] == ["report_curves.png"]


def test_scalerl_losses_runs_every_algo(tmp_path):
    run_sweep("scalerl_losses", tmp_path, SMOKE + BATCH + ["seed=0", "train.steps=2", "scaling.bootstrap=0"])
    jobs = job_dirs(tmp_path)
    assert [overrides(j)["algo"] for j in jobs] == ["grpo", "dapo", "cispo", "gspo", "scalerl"]
    for job in jobs:
        s = summary(job)
        cfg = yaml.safe_load((job / ".hydra/config.yaml").read_text())
        assert s["status"] == "finished" and cfg["algo"]["name"] == overrides(job)["algo"]
        # the loop's end-of-run sigmoid fit ran: with 2 evaluations it reports why there is no fit
        assert "scaling/A" in s or "too few points" in s["scaling/error"]
    md, pngs = R.build_report(tmp_path)
    for algo in ("grpo", "dapo", "cispo", "gspo", "scalerl"):
        assert table_row(md, algo)[1] == "1/1"
    assert {p.name for p in pngs} == {"report_curves.png", "report_scaling.png"}


def test_scalerl_loo_runs_each_component_reverted(tmp_path):
    run_sweep("scalerl_loo", tmp_path, SMOKE + BATCH + ["seed=0", "train.steps=2", "scaling.bootstrap=0"])
    jobs = {overrides(j)["loo_arm"]: j for j in job_dirs(tmp_path)}
    assert set(jobs) == {"scalerl", *LOO_COMPONENT}
    algo = {a: _recipe(yaml.safe_load((j / ".hydra/config.yaml").read_text())) for a, j in jobs.items()}
    for arm, job in jobs.items():
        assert summary(job)["status"] == "finished", arm
        if arm != "scalerl":  # the launched job differs from the full recipe in exactly its component
            assert {k: v for k, v in algo[arm].items() if algo["scalerl"][k] != v} == LOO_COMPONENT[arm]
    # ScaleRL's zero-variance filter and curriculum act in the full recipe's metrics
    assert "train/dropped_groups" in metrics(jobs["scalerl"])[1]
    assert "train/dropped_groups" not in metrics(jobs["no_zero_var_filter"])[1]
    md, _ = R.build_report(tmp_path, plots=False)
    assert table_row(md, "ScaleRL (all components)")[1] == "1/1"
    assert table_row(md, "FP32 LM head off")[8] == "A 0.52 (with FP32 head: 0.61)"


def test_scalerl_offpolicy_runs_each_family(tmp_path):
    run_sweep("scalerl_offpolicy", tmp_path, SMOKE + BATCH + ["seed=0", "train.steps=3", "scaling.bootstrap=0"])
    jobs = {overrides(j)["offpolicy_arm"]: j for j in job_dirs(tmp_path)}
    assert list(jobs) == ["pipeline_8", "ppo_8", "on_policy"]
    lag = {a: [r["rollout/staleness/max"] for r in metrics(j) if r["step"] > 0] for a, j in jobs.items()}
    assert lag == {"pipeline_8": [0, 1, 2], "ppo_8": [0, 0, 0], "on_policy": [0, 0, 0]}
    md, _ = R.build_report(tmp_path, plots=False)
    for label in ("PipelineRL-8 (stale k=8, mu 1)", "PPO-8 (on-policy batch, mu 8)", "on-policy (sync, mu 1)"):
        assert table_row(md, label)[1] == "1/1"
