"""rlx.sweeps.rounds: the round driver with a stand-in for the multirun (no training), and once through a
real two-round sweep; the report's predictive section (rlx.report.tables) on what the driver wrote."""

from __future__ import annotations

import json

import pytest

from rlx.report.tables import predictive_section
from rlx.sweeps.decisions import DECISIONS_JSONL, read_decisions
from rlx.sweeps.rounds import RoundPlan, run_rounds, split_overrides
from scripts.predictive_replay import main as replay_main
from tests.sweeps.sweep_helpers import BATCH, SMOKE, fake_multirun


@pytest.mark.integration
def test_driver_runs_rounds_resumes_in_place_and_stops_the_loser(tmp_path, capsys):
    calls = []
    rc, sweep_dir = run_rounds("scalerl_loo", ["loo_arm=scalerl,on_policy,adv_group", "seed=0,1",
                                               f"hydra.sweep.dir={tmp_path}"], RoundPlan(rounds=4, first_steps=8),
                               runner=fake_multirun(calls))
    assert rc == 0 and sweep_dir == str(tmp_path)
    steps = [next(o for o in c if o.startswith("train.steps=")) for c in calls]
    assert steps == [f"train.steps={8 * 2**r}" for r in range(len(calls))]
    assert all(c[c.index("--config-name") + 1] == "scalerl_loo" and "-m" in c for c in calls)
    records = read_decisions(tmp_path)
    stop = [r for r in records if r["decision"] == "stop"]
    assert [r["arm"] for r in stop] == ["on_policy"], records
    assert "loo_arm=scalerl,adv_group" in calls[stop[0]["round"] + 1]  # the next round runs the survivors only
    assert {r["arm"] for r in records if r["decision"] == "continue"} >= {"scalerl", "adv_group"}
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and p.name != "wandb") == [  # wandb: the driver's
        "adv_group_seed0", "adv_group_seed1", "on_policy_seed0", "on_policy_seed1", "scalerl_seed0", "scalerl_seed1"]
    assert (tmp_path / "predictive.md").read_text().count("| on_policy |") == stop[0]["round"] + 1
    assert "[predictive] round 0 on_policy" in capsys.readouterr().out
    section = "\n".join(predictive_section(tmp_path))
    assert "## Predictive schedule" in section and f"| on_policy | {stop[0]['budget']} |" in section
    assert f"stopped after round {stop[0]['round']}" in section
    assert predictive_section(tmp_path / "scalerl_seed0") == []  # no predictive.jsonl: nothing added
    assert (tmp_path / DECISIONS_JSONL).is_file()
    # scripts/predictive_replay.py on the records left behind decides every round as the driver did: the stand-in
    # appends to each run as a resume does, so a run's records up to a budget are what that round saw
    out = tmp_path / "replay.json"
    totals = replay_main([str(tmp_path), "--arm-key", "loo_arm", "--first-steps", "8", "--rounds", "4",
                          "--json", str(out)])
    replayed = [d for ds in json.loads(out.read_text())["rounds"] for d in ds]
    key = lambda d: (d["round"], d["arm"])  # noqa: E731
    assert [(key(d), d["decision"], d["fit"], d["budget"], d["A"]) for d in sorted(replayed, key=key)] == [
        (key(d), d["decision"], d["fit"], d["budget"], pytest.approx(d["A"])) for d in sorted(records, key=key)]
    # on_policy ran to its stop budget only: 2 seeds x (64 - budget) steps fewer than 3 arms x 2 seeds x 64
    assert totals["steps_run"] == 3 * 2 * 64 - 2 * (64 - stop[0]["budget"])
    assert totals["rank_schedule"][-1] == "on_policy" and totals["rank_full"][-1] == "on_policy"


def test_a_dead_driver_rerun_goes_on_from_its_last_decided_round(tmp_path):
    """The driver dies during round 2 (after rounds 0-1 were decided); the same command goes on at round 2,
    with the same arms and budgets, and the decisions equal those of a driver that never died."""
    args = ["loo_arm=scalerl,on_policy,adv_group", "seed=0,1", "logger=disabled"]
    whole_calls = []
    run_rounds("scalerl_loo", [*args, f"hydra.sweep.dir={tmp_path / 'whole'}"], RoundPlan(rounds=4, first_steps=8),
               runner=fake_multirun(whole_calls))
    calls, real = [], fake_multirun([])

    def dies_in_round_2(cmd):
        calls.append(cmd)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the driver is killed while round 2's multirun runs
        return real(cmd)

    died = tmp_path / "died"
    with pytest.raises(KeyboardInterrupt):
        run_rounds("scalerl_loo", [*args, f"hydra.sweep.dir={died}"], RoundPlan(rounds=4, first_steps=8),
                   runner=dies_in_round_2)
    assert sorted({r["round"] for r in read_decisions(died)}) == [0, 1]
    with open(died / DECISIONS_JSONL, "a") as fh:  # and a decision line half-written by the kill
        fh.write('{"round": 2, "arm": "sca')
    again = []
    rc, _ = run_rounds("scalerl_loo", [*args, f"hydra.sweep.dir={died}"], RoundPlan(rounds=4, first_steps=8),
                       runner=fake_multirun(again))
    assert rc == 0
    same_dir = lambda cmds, d: [[o.replace(str(d), "DIR") for o in c] for c in cmds]  # noqa: E731
    assert same_dir(again, died) == same_dir(whole_calls[2:], tmp_path / "whole")  # round 2 on, same arms and budgets
    assert read_decisions(died) == read_decisions(tmp_path / "whole")


def test_a_rerun_with_another_plan_is_refused(tmp_path):
    args = ["loo_arm=scalerl,on_policy", "seed=0", "logger=disabled", f"hydra.sweep.dir={tmp_path}"]
    run_rounds("scalerl_loo", args, RoundPlan(rounds=2, first_steps=8), runner=fake_multirun([]))
    with pytest.raises(ValueError, match="growth 2 -> 3"):
        run_rounds("scalerl_loo", args, RoundPlan(rounds=2, first_steps=8, growth=3), runner=fake_multirun([]))
    with pytest.raises(ValueError, match="arms"):
        run_rounds("scalerl_loo", [*args, "loo_arm=scalerl"], RoundPlan(rounds=2, first_steps=8),
                   runner=fake_multirun([]))


def test_driver_refuses_keys_it_sets():
    with pytest.raises(ValueError, match="train.steps"):
        split_overrides(["train.steps=5"], "loo_arm", ["a"])
    with pytest.raises(ValueError, match="subdir"):
        split_overrides(["hydra.sweep.subdir=x"], "loo_arm", ["a"])
    assert split_overrides(["seed=0", "loo_arm=a,b"], "loo_arm", ["x"]) == (["seed=0"], ["a", "b"])


@pytest.mark.integration
def test_real_two_round_sweep_resumes_each_job_in_its_directory(tmp_path):
    """`python -m rlx.sweeps --predictive` on scalerl_loo at smoke size: 2 arms x 1 seed, 2 rounds (3 then 6 steps)."""
    from rlx.report import build_report
    from rlx.run.records import read_sweep
    from rlx.sweeps.cli import main

    rc = main(["--predictive", "--rounds", "2", "--first-steps", "3", "--no-report", "scalerl_loo",
               "loo_arm=scalerl,on_policy", "seed=0", *SMOKE, *BATCH, f"hydra.sweep.dir={tmp_path}"])
    assert rc == 0
    runs = {r.name: r for r in read_sweep(tmp_path)}
    assert sorted(runs) == ["on_policy_seed0", "scalerl_seed0"]
    for run in runs.values():
        assert [r["step"] for r in run.records if "val/acc" in r] == list(range(7))  # round 1 went on from step 3
        assert run.get("train.steps") == 6 and run.ok
        assert (run.path / "ckpt" / "step_6").is_dir()
    assert "resume" in (runs["scalerl_seed0"].path / "train.log").read_text()
    assert [r["round"] for r in read_decisions(tmp_path)] == [0, 0, 1, 1]
    md, _ = build_report(tmp_path, plots=False)
    assert "## Predictive schedule" in md and "| scalerl | 6 |" in md
