"""Reruns never duplicate or destroy results: no checkpoint yet, resume=never, a changed config."""

import json

import pytest

from tests.conftest import read_metrics, run_tiny

EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60"]


def test_rerun_before_the_first_checkpoint_logs_each_step_once_and_keeps_the_old_rows(tmp_path):
    with pytest.raises(RuntimeError, match="fail_at_step"):  # a crash at step 3, before any checkpoint
        run_tiny(tmp_path, EASY + ["train.steps=4", "train.ckpt_every=4", "train.fail_at_step=3"])
    first = read_metrics(tmp_path)
    assert [r["step"] for r in first] == [0, 1, 2] and not (tmp_path / "ckpt").exists()
    run_tiny(tmp_path, EASY + ["train.steps=4", "train.ckpt_every=4"])
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4]  # each step once
    kept = [json.loads(x) for x in (tmp_path / "metrics.prev-1.jsonl").read_text().splitlines()]
    assert kept == first  # the earlier rows are not lost


def test_resume_never_over_existing_checkpoints_is_refused_before_building(tmp_path):
    run_tiny(tmp_path, EASY + ["train.steps=2"])
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match=r"train.resume=never but .*ckpt holds checkpoints \[2\]"):
        run_tiny(tmp_path, EASY + ["train.steps=2", "train.resume=never"])
    assert (tmp_path / "metrics.jsonl").read_text() == before and (tmp_path / "ckpt" / "step_2").is_dir()


def test_resume_with_a_changed_setting_is_refused_naming_it(tmp_path):
    run_tiny(tmp_path, EASY + ["train.steps=2"])
    with pytest.raises(ValueError, match=r"algo.lr: 0.001 -> 0.01"):
        run_tiny(tmp_path, EASY + ["train.steps=4", "algo.lr=0.01"])
    run_tiny(tmp_path, EASY + ["train.steps=4", "train.eval_every=1"])  # budget and intervals may change
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4]
