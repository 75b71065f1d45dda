"""Predictive sweeps on synthetic arms: does the rule (rlx/sweeps/rule.py) ever stop an arm that can still win,
and how much compute does it save?

Each scenario draws `arms` sigmoid arms with known A, B, C_mid (R0 shared): the best A uniform in
[0.4, 0.8], every other arm's A below it by a gap uniform in [0, max_gap]; B uniform in [1.2, 3];
C_mid log-uniform in [10, 40] steps. Every arm has `seeds` seeds; each seed's evaluations (every
`eval_every` steps, step 0 included, up to the last budget) are the true curve plus a per-seed
offset (sd `seed_sd`) plus Gaussian noise per point (sd `noise`), drawn once, so a later round
sees the same points plus new ones, as a resumed run would. The rounds then go through the real
code: seeds pooled by rlx.scaling.grouping.pool, fitted by rlx.scaling (fit_points, bootstrap
intervals), decided by rlx.sweeps.rule.decide_points, budgets first_steps * 2^r.

A *false stop* is a stopped arm whose true A is within `margin` of the best true A. Compute saved:
1 - (sum of the budgets the arms received) / (arms x the last budget), over all scenarios.
    python -m benchmarks.predictive [--scenarios 200] [--bootstrap 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

import numpy as np

from rlx.sweeps.rule import decide_points
from rlx.scaling.config import ScalingConfig
from rlx.scaling.curves import sigmoid
from rlx.scaling.grouping import Series, pool


@dataclass
class Figures:
    scenarios: int = 0
    arms: int = 0
    near_best: int = 0  # arms with true A within the margin of the best (must never stop)
    false_stops: int = 0
    clear_losers: int = 0  # true A below the best by more than 0.1
    losers_stopped: int = 0
    steps_run: int = 0  # sum over arms of the final budget (per seed)
    steps_full: int = 0  # every arm to the last budget
    fits_undetermined: int = 0
    decisions: int = 0
    seconds: float = 0.0
    stops_by_round: dict = field(default_factory=dict)  # {round: arms stopped after it}
    false_stop_cases: list = field(default_factory=list)

    @property
    def saved(self) -> float:
        return 1.0 - self.steps_run / self.steps_full if self.steps_full else 0.0

    def summary(self) -> dict:
        return {"scenarios": self.scenarios, "arms": self.arms, "near_best_arms": self.near_best,
                "false_stops": self.false_stops, "false_stop_rate": self.false_stops / max(self.near_best, 1),
                "clear_losers": self.clear_losers, "clear_losers_stopped": self.losers_stopped,
                "compute_saved": self.saved, "stops_by_round": dict(sorted(self.stops_by_round.items())),
                "undetermined_share": self.fits_undetermined / max(self.decisions, 1),
                "seconds": self.seconds}


def scenario(rng: np.random.Generator, arms: int, max_gap: float) -> list[dict]:
    best = rng.uniform(0.4, 0.8)
    gaps = np.concatenate([[0.0], rng.uniform(0.0, max_gap, arms - 1)])
    return [{"A": float(best - g), "B": float(rng.uniform(1.2, 3.0)), "C_mid": float(np.exp(rng.uniform(np.log(10), np.log(40))))}
            for g in gaps]


def simulate(n_scenarios: int = 200, arms: int = 4, seeds: int = 3, rounds: int = 4, first_steps: int = 10,
             eval_every: int = 5, noise: float = 0.02, seed_sd: float = 0.005, max_gap: float = 0.25,
             r0: float = 0.05, bootstrap: int = 50, margin: float = 0.02, seed: int = 0, flat_rounds: int = 3,
             reach_alpha: float = 0.001) -> Figures:
    """Run `n_scenarios` synthetic predictive sweeps through the real fitting and decision code."""
    rng = np.random.default_rng(seed)
    cfg = ScalingConfig(fit="sigmoid", compute="steps", bootstrap=bootstrap, margin=margin)
    last = first_steps * 2 ** (rounds - 1)
    steps = np.arange(0, last + 1, eval_every)
    fig, t0 = Figures(), time.time()
    for _ in range(n_scenarios):
        truth = {f"arm{i}": p for i, p in enumerate(scenario(rng, arms, max_gap))}
        best = max(p["A"] for p in truth.values())
        curves = {a: [sigmoid(steps, p["A"] + rng.normal(0, seed_sd), p["B"], p["C_mid"], r0)
                      + rng.normal(0, noise, steps.size) for _ in range(seeds)] for a, p in truth.items()}
        alive, budgets, flats, stopped = list(truth), {}, {}, set()
        for r in range(rounds):
            budget = first_steps * 2**r
            budgets.update({a: budget for a in alive})
            seen = steps <= budget
            points = {a: pool([Series(steps[seen], steps[seen].astype(float), y[seen]) for y in curves[a]])
                      for a in alive}
            decisions = decide_points(r, points, budgets, cfg, flats, flat_rounds, reach_alpha=reach_alpha)
            flats = {d.arm: d.flat_rounds for d in decisions}
            fig.decisions += len(decisions)
            fig.fits_undetermined += sum(d.fit == "undetermined" for d in decisions)
            for d in decisions:
                if d.decision == "stop":
                    stopped.add(d.arm)
                    fig.stops_by_round[r] = fig.stops_by_round.get(r, 0) + 1
                    if truth[d.arm]["A"] >= best - margin:
                        fig.false_stop_cases.append({"truth": truth, "decision": d.line()})
            alive = [d.arm for d in decisions if d.decision == "continue"]
            if len(alive) <= 1:
                break
        fig.scenarios += 1
        fig.arms += arms
        fig.near_best += sum(p["A"] >= best - margin for p in truth.values())
        fig.false_stops += sum(truth[a]["A"] >= best - margin for a in stopped)
        fig.clear_losers += sum(p["A"] < best - 0.1 for p in truth.values())
        fig.losers_stopped += sum(truth[a]["A"] < best - 0.1 for a in stopped)
        fig.steps_run += sum(budgets.values())
        fig.steps_full += arms * last
    fig.seconds = time.time() - t0
    return fig


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.predictive", description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=200)
    parser.add_argument("--arms", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--first-steps", type=int, default=10)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--seed-sd", type=float, default=0.005)
    parser.add_argument("--bootstrap", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flat-rounds", type=int, default=3)
    parser.add_argument("--reach-alpha", type=float, default=0.001)
    a = parser.parse_args(argv)
    fig = simulate(a.scenarios, a.arms, a.seeds, a.rounds, a.first_steps, noise=a.noise, seed_sd=a.seed_sd,
                   bootstrap=a.bootstrap, seed=a.seed, flat_rounds=a.flat_rounds, reach_alpha=a.reach_alpha)
    out = fig.summary()
    for k, v in out.items():
        print(f"{k:22s} {v:.4g}" if isinstance(v, float) else f"{k:22s} {v}")
    for case in fig.false_stop_cases:
        print("false stop:", case["decision"], case["truth"])
    return out


if __name__ == "__main__":
    main()
