"""SignalMonitor (rlx.rollout.metrics): the warning when no sampled group has differed for train.no_signal_steps
steps in a row, on hand-made rows, on the committed records of the GRPO run that collapsed (docs/results.md), and
in a real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlx.rollout.metrics import SignalMonitor
from rlx.run.config import TrainConfig

RECORDS = Path(__file__).resolve().parents[2] / "docs/runs/smollm2_wp_stated"
NO_SIGNAL_STEPS = TrainConfig().no_signal_steps  # the default the records are checked with


def rows(fracs: list[float], rate: float = 0.0) -> list[dict]:
    return [{"step": i + 1, "train/frac_reward_zero_std": f, "train/reward/mean": rate} for i, f in enumerate(fracs)]


def warnings(mon: SignalMonitor, rs: list[dict]) -> list[tuple[int, str]]:
    return [(r["step"], w) for r in rs for w in mon.update(r["step"], r)]


def test_warns_once_after_patience_uniform_steps_and_rearms_on_a_differing_group():
    # 3 uniform, 1 differing, then 4 uniform (warn at the 4th: step 8), 2 more (no repeat), 1 differing,
    # 4 uniform again (warn at step 15)
    rs = rows([1, 1, 1, 0.75] + [1] * 6 + [0.5] + [1] * 4)
    got = warnings(SignalMonitor(patience=4), rs)
    assert [s for s, _ in got] == [8, 15]
    assert "for 4 steps in a row (every sample failed at step 8)" in got[0][1]


@pytest.mark.parametrize("rate, says", [(1.0, "every sample passed"), (0.5, "each group's samples were rewarded alike")])
def test_the_warning_says_whether_the_groups_failed_or_passed(rate, says):
    (_, line), = warnings(SignalMonitor(patience=2), rows([1, 1], rate))
    assert says in line


def test_a_step_whose_dynamic_sampling_refills_found_a_differing_group_had_a_signal():
    rs = rows([1, 1, 1])
    assert [s for s, _ in warnings(SignalMonitor(patience=2), rs)] == [2]
    rs[0]["train/dynamic_sampling/refilled_groups"] = 0  # refills that found nothing: still no signal
    rs[1]["train/dynamic_sampling/refilled_groups"] = 2  # step 2: every sampled group alike, two refilled ones not
    assert warnings(SignalMonitor(patience=2), rs) == []  # streaks of 1 (step 1) and 1 (step 3)


def test_evaluation_rows_neither_count_nor_break_a_streak():
    rs = rows([1, 1])
    rs.insert(1, {"step": 1, "val/acc": 0.1})  # an evaluation row logged between training rows
    assert [s for s, _ in warnings(SignalMonitor(patience=2), rs)] == [2]


def test_a_resume_replays_the_streak_from_metrics_jsonl(tmp_path):
    # steps 1-6 logged, all uniform; the run resumes after step 4 (steps 5-6 are recomputed)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows([1] * 6)))
    mon = SignalMonitor.for_run(tmp_path, start_step=4, patience=5)
    assert mon.streak == 4 and mon.armed
    assert mon.update(5, rows([1] * 5)[-1])  # the 5th uniform step in a row warns now, not 5 steps later
    done = SignalMonitor.for_run(tmp_path, start_step=6, patience=5)
    assert not done.armed and done.update(7, {"step": 7, "train/frac_reward_zero_std": 1.0}) == []  # warned once


@pytest.mark.skipif(not (RECORDS / "grpo/seed1/metrics.jsonl").is_file(), reason="the word-problem records")
def test_it_would_have_flagged_the_collapsed_grpo_seed_and_no_other_word_problem_run():
    fired = {}
    for run in sorted(RECORDS.glob("*/seed*/metrics.jsonl")):
        rs = [json.loads(line) for line in run.read_text().splitlines() if line.strip()]
        fired[f"{run.parent.parent.name}/{run.parent.name}"] = [s for s, _ in warnings(SignalMonitor(NO_SIGNAL_STEPS), rs)]
    # GRPO seed 1: its last group with differing rewards was at step 33 (docs/results.md), so the streak of
    # NO_SIGNAL_STEPS uniform steps ends at step 33 + 10 = 43; every other run kept a signal
    assert fired.pop("grpo/seed1") == [33 + NO_SIGNAL_STEPS]
    assert len(fired) == 8 and all(v == [] for v in fired.values())


def test_patience_0_never_warns():
    assert warnings(SignalMonitor(0), rows([1] * 30)) == []


def test_a_negative_patience_is_refused_by_the_config():
    with pytest.raises(ValueError, match="train.no_signal_steps must be >= 0"):
        TrainConfig(no_signal_steps=-1)


@pytest.mark.integration
def test_a_run_whose_reward_never_differs_warns_in_train_log(tmp_path):
    from tests.conftest import ROOT, TINY

    run_dir = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "rlx.train", *TINY, "train.steps=3", "train.eval_every=100",
                    "train.ckpt_every=100", "train.no_signal_steps=2",
                    "task.rewards={tests.rollout.reward_fns_constant.zero:1.0}", f"hydra.run.dir={run_dir}"],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    log = (run_dir / "train.log").read_text()
    lines = [ln for ln in log.splitlines() if "[warn] step" in ln and "no sampled group" in ln]
    assert len(lines) == 1 and "[warn] step 2: no sampled group has had differing rewards for 2 steps in a row " \
        "(every sample failed at step 2)" in lines[0], log


def test_a_run_recorded_before_the_setting_existed_resumes_and_may_change_it():
    from omegaconf import OmegaConf

    from rlx.run.resume import config_changes
    from tests.conftest import compose

    saved = OmegaConf.to_container(compose([]), resolve=True)
    del saved["train"]["no_signal_steps"]  # a checkpoint from before this key
    assert config_changes(saved, compose([])) == []
    assert config_changes(saved, compose(["train.no_signal_steps=0"])) == []
    changed = config_changes(saved, compose(["algo.lr=0.5"]))  # a real change is still named
    assert [c.split(":")[0] for c in changed] == ["algo.lr"], changed
