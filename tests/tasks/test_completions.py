"""Completion tables: completions.jsonl and a wandb Table after a run, size-bounded over many dumps."""

import json

from omegaconf import OmegaConf

import pytest
from rlx.run.logging import RunLogger
from tests.conftest import run_tiny

EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=60"]


@pytest.mark.integration
def test_run_writes_completions_jsonl_and_a_wandb_table(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_tiny(tmp_path, EASY + ["logger.mode=offline", "logger.completions_every=2", "logger.completions_rows=5",
                               "task.rewards={correct:1.0,format:0.5}"])
    rows = [json.loads(x) for x in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2] * 5 + [4] * 5
    r = rows[0]
    assert set(r) == {"step", "group", "prompt", "completion", "reward", "advantage", "passed", "reward/correct",
                      "reward/format"}
    assert r["reward"] == r["reward/correct"] + 0.5 * r["reward/format"] and r["prompt"].endswith("=")
    tables = sorted(tmp_path.glob("wandb/offline-run-*/files/media/table/completions_*.table.json"))
    assert len(tables) == 2  # one per dump, as wandb stores a logged Table
    t = json.loads(tables[0].read_text())
    assert t["columns"] == list(r) and len(t["data"]) == 5 and t["data"][0][3] == r["completion"]


class FakeRun:
    def __init__(self):
        self.logged = []

    def log(self, d, step):
        self.logged.append((step, d))


def test_size_stays_bounded_over_many_dumps(tmp_path):
    cfg = OmegaConf.create({"logger": {"mode": "disabled", "completions_max_mb": 0.02}})  # ~20 kB
    log = RunLogger(cfg, tmp_path, None, None)
    log.wandb = FakeRun()  # what would go to wandb
    cap = int(0.02 * 2**20)
    sizes = []
    for step in range(1, 2001):  # a long run: 2000 dumps of 8 rows
        log.log_completions([{"step": step, "prompt": "1+2=", "completion": "3" * 50, "reward": 1.0}] * 8, step)
        sizes.append((tmp_path / "completions.jsonl").stat().st_size)
    assert max(sizes) <= cap
    steps = [json.loads(x)["step"] for x in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert steps[-1] == 2000 and steps == sorted(steps) and steps[0] > 1000  # the newest dumps are kept, whole
    assert all(steps.count(s) == 8 for s in set(steps))
    sent = [s for s, _ in log.wandb.logged]
    assert 0 < len(sent) < 2000 and sent == list(range(1, len(sent) + 1))  # wandb got tables up to the cap only


def test_resume_drops_rows_after_the_checkpoint(tmp_path):
    cfg = OmegaConf.create({"logger": {"mode": "disabled", "completions_max_mb": 1.0}})
    log = RunLogger(cfg, tmp_path, None, None)
    for step in (2, 4, 6):
        log.log_completions([{"step": step, "completion": "x"}], step)
    RunLogger(cfg, tmp_path, None, resume_step=4)
    steps = [json.loads(x)["step"] for x in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert steps == [2, 4]
    RunLogger(cfg, tmp_path, None, None)  # a fresh start keeps the old rows aside
    assert not (tmp_path / "completions.jsonl").exists() and (tmp_path / "completions.prev-1.jsonl").exists()


def test_resume_after_a_kill_mid_append_drops_the_half_written_completion_row(tmp_path):
    cfg = OmegaConf.create({"logger": {"mode": "disabled", "completions_max_mb": 1.0}})
    log = RunLogger(cfg, tmp_path, None, None)
    for step in (2, 4):
        log.log_completions([{"step": step, "completion": "x"}], step)
    with (tmp_path / "completions.jsonl").open("a") as f:
        f.write('{"step": 6, "compl')  # a kill -9 while appending step 6's row
    RunLogger(cfg, tmp_path, None, resume_step=4)
    steps = [json.loads(x)["step"] for x in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert steps == [2, 4]
