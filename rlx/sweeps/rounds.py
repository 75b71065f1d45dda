"""The predictive round driver behind `python -m rlx.sweeps NAME --predictive` (docs/predictive.md): each round one
multirun of the surviving arms, resumed the next round; a dead driver goes on when its command runs again."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from rlx.run.logging import write_text_atomic
from rlx.sweeps.decisions import DECISIONS_JSONL, DECISIONS_MD, append_decisions, read_decisions
from rlx.sweeps.driver_log import DriverLog
from rlx.sweeps.points import arm_points
from rlx.sweeps.rule import decide_points
from rlx.sweeps.spec import arm_axis, sweep_dir_of, sweep_file, train_command

SCHEDULE_JSON = "predictive_schedule.json"  # the first command's schedule and arms: a rerun must match them


@dataclass
class RoundPlan:
    """Round r runs the surviving arms to train.steps = first_steps * growth^r, for `rounds` rounds at most."""

    rounds: int = 4
    first_steps: int = 0  # 0: the sweep file's train.steps / growth^(rounds - 1) (the last round reaches it)
    growth: int = 2
    flat_rounds: int = 3
    max_width: float = 0.5
    reach_alpha: float = 0.001

    def budget(self, r: int) -> int:
        return int(self.first_steps * self.growth**r)


def round_command(name: str, overrides: list[str], arm_key: str, arms: list[str], steps: int) -> list[str]:
    """The one multirun of a round: the surviving arms to `steps`, each job in <arm>_seed<seed> every round."""
    return train_command(name, [*overrides, f"{arm_key}={','.join(arms)}", f"train.steps={steps}",
                                f"hydra.sweep.subdir=${{hydra.runtime.choices.{arm_key}}}_seed${{seed}}"])


def split_overrides(overrides: list[str], arm_key: str, arms: list[str]) -> tuple[list[str], list[str]]:
    """(the overrides without the arm axis, the arms): a command-line arm list replaces the sweep file's."""
    rest = []
    for o in overrides:
        key, sep, value = o.lstrip("+").partition("=")
        if sep and key == "train.steps":
            raise ValueError("train.steps is set by the predictive schedule (--first-steps, --growth, --rounds)")
        if sep and key == "hydra.sweep.subdir":
            raise ValueError("hydra.sweep.subdir is fixed per arm and seed by the predictive schedule")
        if sep and key == arm_key:
            arms = [v.strip() for v in value.split(",") if v.strip()]
        else:
            rest.append(o)
    return rest, arms


def _state(sweep_dir: str | Path, schedule: RoundPlan, arms: list[str]) -> tuple[dict, dict, list[str], int]:
    """(budgets, flat rounds, arms alive, next round) after the last complete round; another plan is refused."""
    sweep_dir = Path(sweep_dir)
    plan = {"schedule": asdict(schedule), "arms": arms}
    path = sweep_dir / SCHEDULE_JSON
    if not path.is_file():
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if read_decisions(sweep_dir):
            raise ValueError(f"{sweep_dir} holds {DECISIONS_JSONL} but no {SCHEDULE_JSON}: not a sweep this driver "
                             f"can go on with; use a new hydra.sweep.dir")
        path.write_text(json.dumps(plan, indent=1) + "\n")
        return {}, {}, list(arms), 0
    first = json.loads(path.read_text())
    if first != plan:
        was, now = first["schedule"], plan["schedule"]
        diff = [f"{k} {was.get(k)} -> {now[k]}" for k in now if was.get(k) != now[k]]
        what = f"schedule {', '.join(diff)}" if diff else f"arms {first['arms']} -> {arms}"
        raise ValueError(f"{sweep_dir} was started with another plan ({what}); rerun with the first command's "
                         f"options to go on, or use a new hydra.sweep.dir")
    budgets, flats, alive, r = {}, {}, list(arms), 0
    records = read_decisions(sweep_dir)
    while True:
        mine = {d["arm"]: d for d in records if d["round"] == r}
        if not mine or set(mine) != set(alive):  # round r never finished deciding: run it again
            break
        budgets.update({a: mine[a]["budget"] for a in alive})
        flats = {a: mine[a]["flat_rounds"] for a in alive}
        alive = [a for a in alive if mine[a]["decision"] == "continue"]
        r += 1
    kept = "".join(json.dumps(d) + "\n" for d in records if d["round"] < r)
    jsonl = sweep_dir / DECISIONS_JSONL
    if jsonl.is_file() and jsonl.read_text() != kept:  # a round cut short while its decisions were written
        write_text_atomic(jsonl, kept)  # (or a line cut by the kill): they come again
    if r:
        print(f"[predictive] {sweep_dir}: rounds 0..{r - 1} were decided before; going on with round {r} "
              f"({len(alive)} arm(s))", flush=True)
    return budgets, flats, alive, r


def run_rounds(name: str, overrides: list[str], schedule: RoundPlan,
               runner: Callable[[list[str]], int] | None = None) -> tuple[int, str]:
    """Run sweep `name` predictively: (exit code, sweep directory). runner: runs one argv (default subprocess)."""
    runner = runner or (lambda cmd: subprocess.run(cmd).returncode)
    arm_key, arms = arm_axis(name)
    if arm_key is None:
        raise ValueError(f"sweep {name!r} has no arm axis (a config group in hydra.sweeper.params)")
    overrides, arms = split_overrides(list(overrides), arm_key, list(arms))
    if not schedule.first_steps:
        full = (sweep_file(name).get("train") or {}).get("steps")
        if not full:
            raise ValueError(f"sweeps/{name}.yaml sets no train.steps: pass --first-steps")
        schedule.first_steps = max(1, int(full) // schedule.growth ** (schedule.rounds - 1))
    sweep_dir, overrides = sweep_dir_of(name, overrides)
    budgets, flats, alive, first_round = _state(sweep_dir, schedule, arms)
    print(f"[predictive] sweep directory {sweep_dir} (if this driver dies, rerun the same command with "
          f"hydra.sweep.dir={sweep_dir}: it goes on from the last decided round)", flush=True)
    log = DriverLog(name, sweep_dir, overrides)
    rc = 1
    try:
        for r in range(first_round, schedule.rounds):
            if len(alive) <= 1:
                break
            steps = schedule.budget(r)
            cmd = round_command(name, overrides, arm_key, alive, steps)
            print(f"[predictive] round {r}: {len(alive)} arm(s) to train.steps={steps}\n+ " + " ".join(cmd), flush=True)
            rc = runner(cmd)
            if rc != 0:
                print(f"[predictive] round {r}: rlx.train exited with {rc}", flush=True)
                return rc, sweep_dir
            budgets.update({a: steps for a in alive})
            points, cfg = arm_points(sweep_dir, arm_key, alive)
            decisions = decide_points(r, points, budgets, cfg, flats, schedule.flat_rounds, schedule.max_width,
                                      schedule.reach_alpha)
            append_decisions(sweep_dir, decisions)
            log.log_round(r, decisions, read_decisions(sweep_dir))
            for d in decisions:
                print("[predictive] " + d.line(), flush=True)
            flats = {d.arm: d.flat_rounds for d in decisions}
            alive = [d.arm for d in decisions if d.decision == "continue"]
            if len(alive) <= 1:
                print(f"[predictive] one arm left ({', '.join(alive)}): done after round {r}", flush=True)
        rc = 0
    finally:
        log.finish(rc)
    total = sum(budgets.values())
    print(f"[predictive] steps per seed, all arms: {total} (every arm to the last budget: "
          f"{len(arms) * schedule.budget(schedule.rounds - 1)}); decisions in {sweep_dir}/{DECISIONS_MD}", flush=True)
    return 0, sweep_dir
