"""rlx.sweeps.driver_log: the predictive driver's decisions in its own wandb run (offline)."""

from __future__ import annotations

import json

import pytest

from rlx.sweeps.decisions import read_decisions
from rlx.sweeps.rounds import RoundPlan, run_rounds
from tests.sweeps.sweep_helpers import fake_multirun

pytestmark = pytest.mark.integration


def test_decisions_go_to_the_drivers_wandb_run(tmp_path):
    """logger.mode=offline: one wandb run in the sweep directory, per round each arm's A / budget / stopped and a
    table of every decision so far; a restarted driver logs to the same run id."""
    args = ["loo_arm=scalerl,on_policy,adv_group", "seed=0,1", "logger.mode=offline", f"hydra.sweep.dir={tmp_path}"]
    run_rounds("scalerl_loo", args, RoundPlan(rounds=4, first_steps=8), runner=fake_multirun([]))
    records = read_decisions(tmp_path)
    run_id = (tmp_path / "predictive_wandb_id").read_text()
    runs = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(runs) == 1
    tables = sorted(runs[0].glob("files/media/table/predictive/decisions_*.table.json"),
                    key=lambda p: int(p.name.split("_")[1]))
    rounds = sorted({r["round"] for r in records})
    assert len(tables) == len(rounds)  # one table per round, each with every decision so far
    last = json.loads(tables[-1].read_text())
    assert len(last["data"]) == len(records)
    assert [row[last["columns"].index("decision")] for row in last["data"]] == [r["decision"] for r in records]
