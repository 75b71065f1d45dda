"""Predictive sweeps (rlx/predictive.py): the decision rule by hand, the synthetic acceptance through the real
fitting code, and the round driver with a stand-in for the multirun (no training)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from rlx.predictive import (
    DECISIONS_JSONL, ArmFit, Schedule, classify, decide, fit_arm, read_decisions, run_rounds, split_overrides,
)
from rlx.report.tables import predictive_section
from rlx.scaling.config import ScalingConfig
from rlx.scaling.curves import sigmoid


def arm(A, lo, hi, status="determined"):
    fit = SimpleNamespace(A=A, B=2.0, C_mid=10.0, R0=0.1, intervals={"A": (lo, hi)})
    return ArmFit(status, fit)


def by_arm(decisions):
    return {d.arm: d for d in decisions}


# ---- (a) the rule by hand -------------------------------------------------------------------------

def test_clear_loser_stops_and_the_leader_runs_on():
    d = by_arm(decide(0, {"lead": arm(0.60, 0.58, 0.62), "low": arm(0.40, 0.38, 0.42)}, {"lead": 10, "low": 10}))
    assert d["lead"].decision == "continue" and "leader" in d["lead"].reason
    assert d["low"].decision == "stop" and d["low"].leader == "lead"
    assert (d["low"].A, d["low"].A_lo, d["low"].A_hi, d["low"].budget, d["low"].round) == (0.40, 0.38, 0.42, 10, 0)


def test_arm_within_the_margin_never_stops():
    # A_hi 0.565 + 0.02 = 0.585 >= leader's A_lo 0.58
    d = by_arm(decide(1, {"lead": arm(0.60, 0.58, 0.62), "near": arm(0.56, 0.55, 0.565)}, {"lead": 20, "near": 20}))
    assert d["near"].decision == "continue" and "can still win" in d["near"].reason
    # with a wider margin the same arm is within reach; with none it stops
    assert by_arm(decide(1, {"lead": arm(0.60, 0.58, 0.62), "near": arm(0.56, 0.55, 0.565)}, {"lead": 1, "near": 1},
                         margin=0.0))["near"].decision == "stop"


def test_undetermined_fits_never_stop_and_never_lead():
    fits = {"lead": arm(0.60, 0.58, 0.62), "edge": arm(0.05, 0.0, 0.06, "undetermined"),
            "nofit": ArmFit("undetermined", note="no fit: too few points")}
    d = by_arm(decide(0, fits, dict.fromkeys(fits, 10)))
    assert d["edge"].decision == d["nofit"].decision == "continue"
    assert "never stops" in d["edge"].reason
    # an undetermined arm with a higher A is not the leader
    d = by_arm(decide(0, {"lead": arm(0.60, 0.58, 0.62), "high": arm(0.95, 0.5, 1.0, "undetermined"),
                          "low": arm(0.3, 0.28, 0.32)}, dict.fromkeys(("lead", "high", "low"), 5)))
    assert d["low"].leader == "lead" and d["low"].decision == "stop"


def test_flat_twice_stops_flat_once_does_not():
    fits = {"lead": arm(0.60, 0.58, 0.62), "flat": ArmFit("flat", note="no fit: flat curve: ...")}
    once = by_arm(decide(0, fits, {"lead": 10, "flat": 10}, flat_rounds=2))
    assert once["flat"].decision == "continue" and once["flat"].flat_rounds == 1
    twice = by_arm(decide(1, fits, {"lead": 20, "flat": 20}, flat_before={"flat": once["flat"].flat_rounds},
                          flat_rounds=2))
    assert twice["flat"].decision == "stop" and twice["flat"].flat_rounds == 2
    # the default waits for a third flat round (docs/predictive.md: two stopped a slow starter)
    assert by_arm(decide(1, fits, {"lead": 20, "flat": 20}, flat_before={"flat": 1}))["flat"].decision == "continue"
    assert by_arm(decide(2, fits, {"lead": 40, "flat": 40}, flat_before={"flat": 2}))["flat"].decision == "stop"
    # a round that is not flat resets the count
    reset = by_arm(decide(1, {"lead": arm(0.60, 0.58, 0.62), "flat": arm(0.59, 0.55, 0.63)}, {"lead": 1, "flat": 1},
                          flat_before={"flat": 1}))
    assert reset["flat"].flat_rounds == 0


def test_a_round_never_stops_every_arm():
    fits = {"a": ArmFit("flat"), "b": ArmFit("flat")}
    d = decide(2, fits, {"a": 40, "b": 40}, flat_before={"a": 1, "b": 1}, flat_rounds=2)
    assert [x.decision for x in d] == ["continue", "continue"] and "never stops every arm" in d[0].reason


def test_refit_that_reaches_the_leader_keeps_the_arm():
    fits = {"lead": arm(0.60, 0.58, 0.62), "low": arm(0.40, 0.38, 0.42)}
    d = by_arm(decide(0, fits, {"lead": 1, "low": 1}, reach_p=lambda a, A: 0.5))
    assert d["low"].decision == "continue" and "fits about as well" in d["low"].reason
    assert by_arm(decide(0, fits, {"lead": 1, "low": 1}, reach_p=lambda a, A: 0.005))["low"].decision == "continue"
    d = by_arm(decide(0, fits, {"lead": 1, "low": 1}, reach_p=lambda a, A: 1e-6))
    assert d["low"].decision == "stop" and "rejected" in d["low"].reason


def test_classify_and_fit_arm_on_real_fits():
    cfg = ScalingConfig(fit="sigmoid", compute="steps", bootstrap=30)
    c = np.tile(np.arange(5.0, 85.0, 5.0), 2)
    rng = np.random.default_rng(0)
    ok = fit_arm(c, sigmoid(c, 0.6, 2.0, 20.0, 0.1) + rng.normal(0, 0.01, c.size), 0.1, cfg)
    assert ok.status == "determined" and abs(ok.A - 0.6) < 0.05
    assert classify(ok.fit, max_width=1e-6)[0] == "undetermined"  # interval too wide
    assert fit_arm(c, np.full(c.size, 0.1), 0.1, cfg).status == "flat"
    assert fit_arm(c[:2], c[:2] / 100, 0.0, cfg).status == "undetermined"  # too few points
    assert fit_arm(np.zeros(0), np.zeros(0), None, cfg).status == "undetermined"
    edge = SimpleNamespace(A=1.0, A_at_edge=True, a_bounds=(0.0, 1.0), intervals={"A": (0.9, 1.0)})
    assert classify(edge)[0] == "undetermined"


# ---- (b) the synthetic acceptance -----------------------------------------------------------------

def test_synthetic_arms_within_the_margin_are_never_stopped():
    from rlx.bench.predictive import simulate

    fig = simulate(n_scenarios=15, bootstrap=50, seed=1)
    print(fig.summary())
    assert fig.near_best >= 15 and fig.false_stops == 0, fig.false_stop_cases
    assert fig.losers_stopped > 0 and 0.0 < fig.saved < 1.0


# ---- (c) the driver, the multirun replaced by synthetic run directories ---------------------------

TRUE = {"scalerl": (0.7, 2.5, 8.0), "on_policy": (0.3, 2.5, 8.0), "adv_group": (0.69, 2.5, 8.0)}


def fake_multirun(calls):
    """Stand-in for `python -m rlx.train -m ...`: writes what each job would (config, overrides, metrics
    appended from its last step, like a resumed run) into <sweep dir>/<arm>_seed<seed>."""

    def run(cmd):
        calls.append(cmd)
        kv = dict(o.split("=", 1) for o in cmd if "=" in o and not o.startswith("-"))
        steps, root = int(kv["train.steps"]), Path(kv["hydra.sweep.dir"])
        assert kv["hydra.sweep.subdir"] == "${hydra.runtime.choices.loo_arm}_seed${seed}"
        for name in kv["loo_arm"].split(","):
            for seed in kv["seed"].split(","):
                job = root / f"{name}_seed{seed}"
                (job / ".hydra").mkdir(parents=True, exist_ok=True)
                cfg = {"seed": int(seed), "train": {"steps": steps}, "logger": {"group": "scalerl_loo"},
                       "scaling": {"fit": "sigmoid", "compute": "steps", "metric": "val/acc", "bootstrap": 50}}
                (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
                (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
                    [f"loo_arm={name}", f"seed={seed}", f"train.steps={steps}"]))
                metrics = job / "metrics.jsonl"
                done = [json.loads(x)["step"] for x in metrics.read_text().splitlines()] if metrics.exists() else []
                rng = np.random.default_rng(hash((name, seed, steps)) % 2**32)
                A, B, C = TRUE[name]
                with metrics.open("a") as fh:
                    for s in range(max(done, default=-2) + 2, steps + 1, 2):
                        acc = float(sigmoid(s, A, B, C, 0.1) + rng.normal(0, 0.01)) if s else 0.1
                        fh.write(json.dumps({"step": s, "val/acc": acc}) + "\n")
        return 0

    return run


def test_driver_runs_rounds_resumes_in_place_and_stops_the_loser(tmp_path, capsys):
    calls = []
    rc, sweep_dir = run_rounds("scalerl_loo", ["loo_arm=scalerl,on_policy,adv_group", "seed=0,1",
                                               f"hydra.sweep.dir={tmp_path}"], Schedule(rounds=4, first_steps=8),
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


def test_a_dead_driver_rerun_goes_on_from_its_last_decided_round(tmp_path):
    """The driver dies during round 2 (after rounds 0-1 were decided); the same command goes on at round 2,
    with the same arms and budgets, and the decisions equal those of a driver that never died."""
    args = ["loo_arm=scalerl,on_policy,adv_group", "seed=0,1", "logger=disabled"]
    whole_calls = []
    run_rounds("scalerl_loo", [*args, f"hydra.sweep.dir={tmp_path / 'whole'}"], Schedule(rounds=4, first_steps=8),
               runner=fake_multirun(whole_calls))
    calls, real = [], fake_multirun([])

    def dies_in_round_2(cmd):
        calls.append(cmd)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the driver is killed while round 2's multirun runs
        return real(cmd)

    died = tmp_path / "died"
    with pytest.raises(KeyboardInterrupt):
        run_rounds("scalerl_loo", [*args, f"hydra.sweep.dir={died}"], Schedule(rounds=4, first_steps=8),
                   runner=dies_in_round_2)
    assert sorted({r["round"] for r in read_decisions(died)}) == [0, 1]
    with open(died / DECISIONS_JSONL, "a") as fh:  # and a decision line half-written by the kill
        fh.write('{"round": 2, "arm": "sca')
    again = []
    rc, _ = run_rounds("scalerl_loo", [*args, f"hydra.sweep.dir={died}"], Schedule(rounds=4, first_steps=8),
                       runner=fake_multirun(again))
    assert rc == 0
    same_dir = lambda cmds, d: [[o.replace(str(d), "DIR") for o in c] for c in cmds]  # noqa: E731
    assert same_dir(again, died) == same_dir(whole_calls[2:], tmp_path / "whole")  # round 2 on, same arms and budgets
    assert read_decisions(died) == read_decisions(tmp_path / "whole")


def test_a_rerun_with_another_plan_is_refused(tmp_path):
    args = ["loo_arm=scalerl,on_policy", "seed=0", "logger=disabled", f"hydra.sweep.dir={tmp_path}"]
    run_rounds("scalerl_loo", args, Schedule(rounds=2, first_steps=8), runner=fake_multirun([]))
    with pytest.raises(ValueError, match="growth 2 -> 3"):
        run_rounds("scalerl_loo", args, Schedule(rounds=2, first_steps=8, growth=3), runner=fake_multirun([]))
    with pytest.raises(ValueError, match="arms"):
        run_rounds("scalerl_loo", [*args, "loo_arm=scalerl"], Schedule(rounds=2, first_steps=8),
                   runner=fake_multirun([]))


def test_decisions_go_to_the_drivers_wandb_run(tmp_path):
    """logger.mode=offline: one wandb run in the sweep directory, per round each arm's A / budget / stopped and a
    table of every decision so far; a restarted driver logs to the same run id."""
    args = ["loo_arm=scalerl,on_policy,adv_group", "seed=0,1", "logger.mode=offline", f"hydra.sweep.dir={tmp_path}"]
    run_rounds("scalerl_loo", args, Schedule(rounds=4, first_steps=8), runner=fake_multirun([]))
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


def test_driver_refuses_keys_it_sets():
    with pytest.raises(ValueError, match="train.steps"):
        split_overrides(["train.steps=5"], "loo_arm", ["a"])
    with pytest.raises(ValueError, match="subdir"):
        split_overrides(["hydra.sweep.subdir=x"], "loo_arm", ["a"])
    assert split_overrides(["seed=0", "loo_arm=a,b"], "loo_arm", ["x"]) == (["seed=0"], ["a", "b"])


def test_real_two_round_sweep_resumes_each_job_in_its_directory(tmp_path):
    """`python -m rlx.sweep --predictive` on scalerl_loo at smoke size: 2 arms x 1 seed, 2 rounds (3 then 6 steps)."""
    from rlx.report import build_report
    from rlx.runs import read_sweep
    from rlx.sweep import main
    from tests.sweeps.sweep_helpers import BATCH, SMOKE

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
