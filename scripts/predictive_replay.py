"""Replay a finished sweep's records through the predictive rule of `python -m rlx.sweeps NAME --predictive`
(rlx.sweeps.rule; docs/predictive.md): round r sees every run's evaluations up to step first_steps * growth^r,
decides with the same function the driver calls, and the arms it stops see no later round.

That is what the predictive sweep itself would have seen when each round ends on an evaluation step and a run
resumed at a round's end continues exactly as the uninterrupted run did (a resume restores every RNG stream, and
the lr must not depend on train.steps after warmup). Say so beside any figure from here.

    python scripts/predictive_replay.py docs/runs/scalerl_smollm2/main --arm-key smollm2_scalerl_arm \
        --first-steps 12 --rounds 4

Prints each round's decisions, the steps and FLOPs the schedule would have spent against the full sweep's, and
the arms ranked by A both ways (the full sweep's: every run's points pooled per arm, fitted once).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import asdict

import numpy as np

from rlx.run.records import read_sweep
from rlx.scaling.grouping import Series, evaluations, pool
from rlx.sweeps.points import scaling_config
from rlx.sweeps.rounds import RoundPlan
from rlx.sweeps.rule import decide_points, fit_arm


def arm_series(runs: list, arm_key: str, metric: str, compute: str) -> dict[str, list[Series]]:
    """{arm: [one Series per seed]} of a sweep's runs (rlx.run.records.read_sweep)."""
    out = defaultdict(list)
    for run in runs:
        arm = run.override(arm_key) or run.choices.get(arm_key)
        if arm is None:
            raise ValueError(f"{run.path}: no '{arm_key}' in its overrides or config choices")
        out[arm].append(evaluations(run, metric, compute))
    return dict(out)


def up_to(series: Series, steps: int) -> Series:
    keep = series.step <= steps
    return Series(step=series.step[keep], compute=series.compute[keep], reward=series.reward[keep])


def replay(series: dict[str, list[Series]], cfg, plan: RoundPlan):
    """(decisions per round [[Decision]], {arm: the last budget it ran to}), as the driver would decide them."""
    alive, flats, budgets, rounds = sorted(series), {}, {}, []
    for r in range(plan.rounds):
        if len(alive) <= 1:
            break
        steps = plan.budget(r)
        budgets.update({arm: steps for arm in alive})
        points = {arm: pool([up_to(s, steps) for s in series[arm]]) for arm in alive}
        decisions = decide_points(r, points, budgets, cfg, flats, plan.flat_rounds, plan.max_width, plan.reach_alpha)
        rounds.append(decisions)
        flats = {d.arm: d.flat_rounds for d in decisions}
        alive = [d.arm for d in decisions if d.decision == "continue"]
    return rounds, budgets


def spent(series: list[Series], steps: int) -> float:
    """The compute the arm's seeds had spent by `steps` (summed over seeds)."""
    return float(sum(s.compute[s.step <= steps].max(initial=0.0) for s in series))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir")
    p.add_argument("--arm-key", required=True, help="the sweep's arm axis (a config group in hydra.sweeper.params)")
    p.add_argument("--first-steps", type=int, required=True)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--growth", type=int, default=2)
    p.add_argument("--compute", help="the fit's compute axis (default: the runs' scaling.compute)")
    p.add_argument("--json", help="write the decisions and totals here")
    a = p.parse_args(argv)
    plan = RoundPlan(rounds=a.rounds, first_steps=a.first_steps, growth=a.growth)
    runs = read_sweep(a.sweep_dir)  # read once: the config, the fit's axis and FLOPs all come from these
    if not runs:
        raise SystemExit(f"{a.sweep_dir}: no run directory (metrics.jsonl) under it")
    cfg = scaling_config(runs)
    if a.compute:
        cfg.compute = a.compute
    series = arm_series(runs, a.arm_key, cfg.metric, cfg.compute)
    try:
        flops = arm_series(runs, a.arm_key, cfg.metric, "flops")
    except ValueError:  # the runs log no FLOPs: steps only
        flops = None
    rounds, budgets = replay(series, cfg, plan)
    for decisions in rounds:
        for d in decisions:
            print(d.line())
    last = max(int(s.step.max()) for runs in series.values() for s in runs)
    full_steps = sum(last * len(series[arm]) for arm in series)
    run_steps = sum(budgets.get(arm, last) * len(series[arm]) for arm in series)
    full_flops = sum(spent(flops[arm], last) for arm in series) if flops else float("nan")
    run_flops = sum(spent(flops[arm], budgets.get(arm, last)) for arm in series) if flops else float("nan")
    full_fits = {arm: fit_arm(*pool(runs), cfg, plan.max_width) for arm, runs in series.items()}
    full_rank = sorted(series, key=lambda arm: -(full_fits[arm].A if full_fits[arm].A is not None else -1))
    final = {d.arm: d for decisions in rounds for d in decisions}  # each arm's last decision
    # the schedule's ranking: the arms it kept to the end first, each group by its last A
    kept = lambda arm: arm not in final or final[arm].decision == "continue"  # noqa: E731
    last_a = lambda arm: final[arm].A if arm in final and final[arm].A is not None else -1  # noqa: E731
    its_rank = sorted(series, key=lambda arm: (not kept(arm), -last_a(arm)))
    totals = {"steps_run": run_steps, "steps_full": full_steps, "flops_run": run_flops, "flops_full": full_flops,
              "saving_steps": 1 - run_steps / full_steps, "saving_flops": 1 - run_flops / full_flops,
              "rank_full": full_rank, "rank_schedule": its_rank,
              "A_full": {arm: f.A for arm, f in full_fits.items()},
              "A_full_interval": {arm: f.A_interval for arm, f in full_fits.items()},
              "fit_full": {arm: f.status for arm, f in full_fits.items()}}
    print(f"steps, all runs: {run_steps} of {full_steps} (saving {totals['saving_steps']:.1%}); "
          f"FLOPs {run_flops:.3g} of {full_flops:.3g} (saving {totals['saving_flops']:.1%})")
    print("ranking by A, full sweep: " + " > ".join(f"{arm} {full_fits[arm].A}" for arm in full_rank))
    print("ranking, the schedule:    " + " > ".join(its_rank) + ("  (equal)" if its_rank == full_rank else "  (differs)"))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"rounds": [[asdict(d) for d in ds] for ds in rounds], **totals}, fh, indent=1,
                      default=lambda x: x.tolist() if isinstance(x, np.ndarray) else float(x))
    return totals


if __name__ == "__main__":
    main()
