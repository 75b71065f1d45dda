"""Whole tiny runs: the rollout-correction metrics are in every step of metrics.jsonl, and the mismatch
split of a stale run (rollout.mode=stale, k=2) adds up to the total."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_tiny
from tests.run.test_train import EASY

pytestmark = pytest.mark.integration

EVERY_STEP = [
    "rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/kl_seq", "rollout_corr/k3_kl_seq",
    "rollout_corr/rollout_is_masked_fraction", "rollout_corr/rollout_is_seq_masked_fraction",
    "rollout_corr/rollout_is_mean", "rollout_corr/rollout_is_max", "rollout_corr/weight_mean",
    "rollout_corr/weight_max", "rollout_corr/seq_log_ratio/p05", "rollout_corr/seq_log_ratio/p50",
    "rollout_corr/seq_log_ratio/p95", "sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean",
]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _train_rows(run_dir: Path) -> list[dict]:
    return [r for r in _rows(run_dir) if "actor/grad_norm" in r]


def test_default_run_logs_the_mismatch_metrics_every_step(tmp_path):
    run_tiny(tmp_path, ["train.steps=2"])
    rows = _train_rows(tmp_path)
    assert len(rows) == 2
    for r in rows:
        missing = [k for k in EVERY_STEP if k not in r]
        assert not missing, missing
        assert r["rollout_corr/weight_mean"] == 1.0  # off: nothing applied
        assert r["rollout_corr/k3_kl"] >= 0 and r["rollout_corr/seq_log_ratio/p05"] <= r["rollout_corr/seq_log_ratio/p95"]
        assert "rollout_corr/split/total/kl" not in r  # the split is off by default


def test_stale_run_split_adds_up(tmp_path):
    # an easy task and partial credit: groups with reward variance, so the policy moves (staleness > 0)
    run_tiny(tmp_path, EASY + ["task.rewards={correct: 1.0, format: 0.25}","rollout.mode=stale", "rollout.max_staleness=2", "algo.mismatch_split_every=1",
                        "algo.correction.level=sequence", "algo.correction.action=mask", "algo.lr=3e-3",
                        "train.steps=4"])
    rows = _train_rows(tmp_path)
    assert len(rows) == 4
    for r in rows:
        parts = r["rollout_corr/split/engine/kl"] + r["rollout_corr/split/staleness/kl"]
        assert parts == pytest.approx(r["rollout_corr/split/total/kl"], abs=1e-5)
        # the split's total is the mismatch the update measured (the same forward, before the update)
        assert r["rollout_corr/split/total/kl"] == pytest.approx(r["rollout_corr/kl"], abs=1e-5)
    assert rows[0]["rollout_corr/split/staleness/abs_mean"] == 0.0  # step 1 samples the current weights
    assert rows[3]["rollout_corr/split/staleness/abs_mean"] > 10 * rows[3]["rollout_corr/split/engine/abs_mean"]


def test_async_run_keeps_the_versions_the_split_needs(tmp_path):
    """PipelineRL-k (k=2): tokens of one row may come from several versions; every one is kept, so no step
    reports a missing version, and the parts add up."""
    run_tiny(tmp_path, EASY + ["task.rewards={correct: 1.0, format: 0.25}", "rollout.mode=async",
                               "rollout.max_staleness=2", "algo.mismatch_split_every=1", "algo.lr=3e-3",
                               "train.steps=4"])
    rows = _train_rows(tmp_path)
    assert len(rows) == 4 and not any("rollout_corr/split/missing_versions" in r for r in rows)
    for r in rows:
        parts = r["rollout_corr/split/engine/kl"] + r["rollout_corr/split/staleness/kl"]
        assert parts == pytest.approx(r["rollout_corr/split/total/kl"], abs=1e-5)
