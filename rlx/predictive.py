"""Predictive sweeps (issue 17): run a sweep's arms in rounds of growing step budget and stop the arms
whose fitted curves say they cannot win.

The rule (`decide`), after each round, with every arm's seeds pooled and fitted by rlx.scaling
(`fit_points`, the sweep's `scaling.*` options, bootstrap intervals of A):
- a fit is *determined* when it succeeded, A is inside its grid, A has a bootstrap interval that
  stays inside the grid and is at most `max_width` wide; *flat* when the fitter refused the curve
  as flat (all rewards equal, or the F-test against a constant reward at R0); *undetermined*
  otherwise (A at the grid edge, interval too wide or missing, fit failed, too few points);
- the leader is the determined arm with the highest A;
- a determined arm stops when A_hi(arm) + margin < A_lo(leader) (margin: `scaling.margin`, ScaleRL's 0.02);
- an arm whose fit is flat for `flat_rounds` (3) consecutive rounds stops (the issue's 2 stopped a slow
  starter in the synthetic runs: docs/predictive.md);
- an undetermined fit never stops an arm, and a round never stops every arm still running.
Survivors run the next round with the budget times `growth`, in the same run directories, so every
job resumes from its checkpoint (rlx.train's resume).

The driver (`run_rounds`, behind `python -m rlx.sweep NAME --predictive`) runs each round as ONE
multirun of the surviving arms (any launcher), with each job's directory fixed per arm and seed
(`hydra.sweep.subdir=<arm>_seed<seed>`), and appends every decision to
`<sweep_dir>/predictive.jsonl` (and rewrites `predictive.md`). docs/predictive.md.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

DECISIONS_JSONL, DECISIONS_MD = "predictive.jsonl", "predictive.md"


# ---- the decision rule (pure: points in, records out) -------------------------------------------

@dataclass
class ArmFit:
    """One arm's fit after a round: status determined | undetermined | flat, the fit (if any), and why."""

    status: str
    fit: object | None = None  # rlx.scaling.curves.SigmoidFit
    note: str = ""

    @property
    def A(self) -> float | None:
        return None if self.fit is None else float(self.fit.A)

    @property
    def A_interval(self) -> tuple[float, float] | None:
        return None if self.fit is None else self.fit.intervals.get("A")


@dataclass
class Decision:
    """One arm's decision after one round (a line of predictive.jsonl)."""

    round: int
    arm: str
    budget: int  # train.steps the arm has run to
    decision: str  # continue | stop
    reason: str
    fit: str  # determined | undetermined | flat
    A: float | None = None
    A_lo: float | None = None
    A_hi: float | None = None
    B: float | None = None
    C_mid: float | None = None
    R0: float | None = None
    leader: str | None = None
    flat_rounds: int = 0  # consecutive rounds flat, this one included

    def line(self) -> str:
        a = "-" if self.A is None else f"{self.A:.3f}"
        iv = "" if self.A_lo is None else f" [{self.A_lo:.3f}, {self.A_hi:.3f}]"
        return f"round {self.round} {self.arm}: steps {self.budget}, A {a}{iv} ({self.fit}) -> {self.decision}: {self.reason}"


def fit_arm(compute, reward, r0, cfg, max_width: float = 0.5, **fit_overrides) -> ArmFit:
    """Fit one arm's pooled points (compute [N], reward [N], R0) with the scaling config's sigmoid options
    (fit_overrides: extra fitter arguments) and classify the fit."""
    from rlx.scaling.fitting import fit_points

    if len(compute) == 0:
        return ArmFit("undetermined", note="no evaluation after step 0")
    try:
        fit = fit_points(compute, reward, cfg, kind="sigmoid", r0=r0, **fit_overrides)
    except ValueError as err:
        return ArmFit("flat" if str(err).startswith("flat curve") else "undetermined", note=f"no fit: {err}")
    status, note = classify(fit, max_width)
    return ArmFit(status, fit, note)


def classify(fit, max_width: float = 0.5) -> tuple[str, str]:
    """(determined | undetermined, why) of a successful sigmoid fit."""
    lo_edge, hi_edge = fit.a_bounds
    iv = fit.intervals.get("A")
    if fit.A_at_edge:
        return "undetermined", f"A {fit.A:.3f} at the edge of its grid"
    if iv is None:
        return "undetermined", "no bootstrap interval of A (scaling.bootstrap=0)"
    if iv[0] <= lo_edge + 1e-9 or iv[1] >= hi_edge - 1e-9:
        return "undetermined", f"A's interval [{iv[0]:.3f}, {iv[1]:.3f}] reaches the edge of its grid"
    if iv[1] - iv[0] > max_width:
        return "undetermined", f"A's interval [{iv[0]:.3f}, {iv[1]:.3f}] wider than {max_width:g}"
    return "determined", ""


def decide(round_: int, fits: dict[str, ArmFit], budgets: dict[str, int], margin: float = 0.02,
           flat_before: dict[str, int] | None = None, flat_rounds: int = 3,
           reach_p: Callable[[str, float], float] | None = None, reach_alpha: float = 0.001) -> list[Decision]:
    """The decision for every arm in `fits` (the arms still running) after round `round_`.

    budgets: {arm: train.steps it has run to}; flat_before: {arm: consecutive flat rounds before this one}.
    reach_p(arm, A): p-value of "the arm's asymptote is A" (`reach_test`); an arm the intervals rule out
    stops only when p < reach_alpha (None: the intervals alone decide).
    """
    flat_before = flat_before or {}
    determined = {a: f for a, f in fits.items() if f.status == "determined"}
    leader = max(determined, key=lambda a: (determined[a].A, a)) if determined else None
    lead_lo = determined[leader].A_interval[0] if leader else None
    out = []
    for arm, f in fits.items():
        flats = flat_before.get(arm, 0) + 1 if f.status == "flat" else 0
        iv = f.A_interval
        d = Decision(round_, arm, int(budgets[arm]), "continue", "", f.status, f.A,
                     None if iv is None else float(iv[0]), None if iv is None else float(iv[1]),
                     None if f.fit is None else float(f.fit.B), None if f.fit is None else float(f.fit.C_mid),
                     None if f.fit is None else float(f.fit.R0), leader, flats)
        if f.status == "flat":
            if flats >= flat_rounds:
                d.decision, d.reason = "stop", f"flat for {flats} consecutive rounds ({f.note.removeprefix('no fit: ')})"
            else:
                d.reason = f"flat ({flats} of {flat_rounds} rounds before it stops)"
        elif f.status == "undetermined":
            d.reason = f"undetermined ({f.note}): never stops an arm"
        elif arm == leader:
            d.reason = "leader (highest A among determined fits)"
        elif iv[1] + margin < lead_lo - 1e-12:
            p = reach_p(arm, lead_lo - margin) if reach_p is not None else 0.0
            if p < reach_alpha:
                d.decision = "stop"
                d.reason = f"A_hi {iv[1]:.3f} + margin {margin:g} < leader {leader}'s A_lo {lead_lo:.3f}" + (
                    f"; a refit with A = {lead_lo - margin:.3f} is rejected (F-test p = {p:.2g})" if reach_p else "")
            else:
                d.reason = (f"A_hi {iv[1]:.3f} + margin {margin:g} < leader {leader}'s A_lo {lead_lo:.3f}, but a refit "
                            f"with A = {lead_lo - margin:.3f} fits about as well (F-test p = {p:.2g}): can still win")
        else:
            d.reason = f"can still win: A_hi {iv[1]:.3f} + margin {margin:g} >= leader {leader}'s A_lo {lead_lo:.3f}"
        out.append(d)
    if out and all(d.decision == "stop" for d in out):  # only flat arms left: keep them all, nothing to rank
        for d in out:
            d.decision, d.reason = "continue", f"{d.reason}; kept: a round never stops every arm"
    return out


def decide_points(round_: int, points: dict[str, tuple], budgets: dict[str, int], cfg,
                  flat_before: dict[str, int] | None = None, flat_rounds: int = 3, max_width: float = 0.5,
                  reach_alpha: float = 0.001, **fit_overrides) -> list[Decision]:
    """Fit every arm's pooled points {arm: (compute [N], reward [N], R0)} and `decide`."""
    fits = {arm: fit_arm(c, y, r0, cfg, max_width, **fit_overrides) for arm, (c, y, r0) in points.items()}
    reach = lambda arm, a: reach_test(*points[arm], fits[arm].fit, a, cfg, **fit_overrides)  # noqa: E731
    return decide(round_, fits, budgets, cfg.margin, flat_before, flat_rounds, reach, reach_alpha)


def reach_test(compute, reward, r0, fit, A: float, cfg, **fit_overrides) -> float:
    """p-value of the F-test of the arm's free fit against a refit with its asymptote held at A (ScaleRL's
    fixed-A refit): small p means the data reject A. Bootstrap intervals of A fitted before the curve's
    midpoint can be narrow and wrong (a curve that has not bent yet looks like one that has saturated
    low); this test asks the data directly. 1.0 when the refit fails (never a reason to stop)."""
    from scipy.special import fdtrc

    from rlx.scaling.fitting import fit_points

    try:
        held = fit_points(compute, reward, cfg, kind="sigmoid", r0=r0, **{**fit_overrides, "A": A, "bootstrap": 0,
                                                                          "flat_alpha": 0.0})
    except ValueError:
        return 1.0
    dof = fit.n_points - 3
    if dof <= 0 or fit.sse <= 0:
        return 0.0 if held.sse > fit.sse else 1.0
    f = max(held.sse - fit.sse, 0.0) / (fit.sse / dof)
    return float(fdtrc(1, dof, f)) if f > 0 else 1.0


# ---- decisions on disk ---------------------------------------------------------------------------

def append_decisions(sweep_dir: str | Path, decisions: list[Decision]) -> None:
    """Append the round's decisions to SWEEP_DIR/predictive.jsonl and rewrite predictive.md from all of them."""
    sweep_dir = Path(sweep_dir)
    with open(sweep_dir / DECISIONS_JSONL, "a") as fh:
        for d in decisions:
            fh.write(json.dumps(asdict(d)) + "\n")
    (sweep_dir / DECISIONS_MD).write_text(decisions_markdown(read_decisions(sweep_dir)))


def read_decisions(sweep_dir: str | Path) -> list[dict]:
    """Every decision recorded under SWEEP_DIR (predictive.jsonl), in order; [] when there is none."""
    from rlx.runs import parse_metrics  # a last line cut by a kill is dropped; an earlier bad line raises

    path = Path(sweep_dir) / DECISIONS_JSONL
    if not path.is_file():
        return []
    return [row for _, row in parse_metrics(path, key="round")[0]]


def arm_outcomes(records: list[dict]) -> dict[str, dict]:
    """{arm: its last decision}: the budget it received and, for a stopped arm, the round and reason."""
    out: dict[str, dict] = {}
    for r in records:
        out[r["arm"]] = r
    return out


def decisions_markdown(records: list[dict]) -> str:
    """predictive.md: one row per decision."""
    lines = ["# Predictive sweep: decisions per round", "",
             "A with its bootstrap interval, pooled over seeds; rule in docs/predictive.md.", "",
             "| round | arm | steps | A [interval] | fit | decision | reason |", "|---|---|---|---|---|---|---|"]
    for r in records:
        a = "-" if r.get("A") is None else f"{r['A']:.3f}"
        if r.get("A_lo") is not None:
            a += f" [{r['A_lo']:.3f}, {r['A_hi']:.3f}]"
        lines.append(f"| {r['round']} | {r['arm']} | {r['budget']} | {a} | {r['fit']} | {r['decision']} | "
                     f"{str(r['reason']).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


# ---- the round driver ----------------------------------------------------------------------------

@dataclass
class Schedule:
    """Round r runs the surviving arms to train.steps = first_steps * growth^r, for `rounds` rounds at most."""

    rounds: int = 4
    first_steps: int = 0  # 0: the sweep file's train.steps / growth^(rounds - 1) (the last round reaches it)
    growth: int = 2
    flat_rounds: int = 3
    max_width: float = 0.5
    reach_alpha: float = 0.001

    def budget(self, r: int) -> int:
        return int(self.first_steps * self.growth**r)


def job_subdir(arm_key: str) -> str:
    """Each job's directory under the sweep directory, the same in every round: <arm>_seed<seed>."""
    return f"${{hydra.runtime.choices.{arm_key}}}_seed${{seed}}"


def round_command(name: str, overrides: list[str], arm_key: str, arms: list[str], steps: int) -> list[str]:
    """The one multirun of a round: the surviving arms (every seed) to `steps`, job directories fixed per arm+seed."""
    from rlx.sweep import train_command

    return train_command(name, [*overrides, f"{arm_key}={','.join(arms)}", f"train.steps={steps}",
                                f"hydra.sweep.subdir={job_subdir(arm_key)}"])


def arm_points(sweep_dir: str | Path, arm_key: str, arms: list[str]):
    """({arm: (compute [N], reward [N], R0)} with seeds pooled, the sweep's ScalingConfig) from the runs so far."""
    from rlx.report.scalerl import scaling_config
    from rlx.runs import read_sweep
    from rlx.scaling.grouping import evaluations, pool

    runs = read_sweep(sweep_dir)
    cfg = scaling_config(runs)
    points = {}
    for arm in arms:
        mine = [r for r in runs if (r.override(arm_key) or r.choices.get(arm_key)) == arm]
        series = []
        for run in mine:
            try:
                series.append(evaluations(run, cfg.metric, cfg.compute))
            except ValueError:
                continue  # no evaluation yet: the arm's fit is undetermined
        points[arm] = pool(series)
    return points, cfg


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


SCHEDULE_JSON = "predictive_schedule.json"


def _state(sweep_dir: str | Path, schedule: "Schedule", arms: list[str]) -> tuple[dict, dict, list[str], int]:
    """(budgets, flat rounds, arms alive, next round) of a sweep directory: a new sweep's, or, when the driver
    of this sweep directory died, the state after its last complete round (predictive.jsonl), so rerunning
    the same command goes on from there. Refuses a rerun whose schedule or arms differ from the first."""
    from rlx.logging import write_text_atomic

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


class DriverLog:
    """The driver's wandb run (group = the sweep's name, job_type predictive): per round, each arm's A with
    its interval, budget and whether it runs on, and a table of every decision so far. Its mode, project and
    entity are the command line's logger.mode / logger.project / logger.entity (offline by default, like
    every run; logger=disabled or logger.mode=disabled: none). The run id is kept in the sweep directory, so
    a restarted driver appends to the same run."""

    def __init__(self, name: str, sweep_dir: str | Path, overrides: list[str]):
        from rlx.config import LoggerConfig

        default = LoggerConfig()
        kv = {o.lstrip("+").split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "=" in o}
        self.mode = "disabled" if kv.get("logger") == "disabled" else kv.get("logger.mode", default.mode)
        self.run = None
        if self.mode == "disabled":
            return
        import os

        import wandb

        id_file = Path(sweep_dir) / "predictive_wandb_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else None
        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(project=kv.get("logger.project", default.project), entity=kv.get("logger.entity", default.entity),
                              group=kv.get("logger.group", name), job_type="predictive", name=f"{name}-predictive",
                              dir=str(sweep_dir), mode=self.mode, id=run_id, resume="allow" if run_id else None,
                              reinit="finish_previous", config={"sweep": name, "sweep_dir": str(sweep_dir)})
        id_file.write_text(self.run.id)

    def log_round(self, round_: int, decisions: list[Decision], records: list[dict]) -> None:
        if self.run is None:
            return
        import wandb

        row: dict = {"predictive/round": round_, "predictive/arms_running": sum(d.decision == "continue" for d in decisions)}
        for d in decisions:
            for key in ("A", "A_lo", "A_hi", "B"):
                if getattr(d, key) is not None:
                    row[f"predictive/{d.arm}/{key}"] = getattr(d, key)
            row[f"predictive/{d.arm}/budget"] = d.budget
            row[f"predictive/{d.arm}/stopped"] = int(d.decision == "stop")
        cols = list(asdict(decisions[0])) if decisions else []
        row["predictive/decisions"] = wandb.Table(columns=cols, data=[[r.get(c) for c in cols] for r in records])
        self.run.log(row, step=round_)

    def finish(self, exit_code: int) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None


def run_rounds(name: str, overrides: list[str], schedule: Schedule,
               runner: Callable[[list[str]], int] | None = None) -> tuple[int, str]:
    """Run sweep `name` predictively; returns (exit code, sweep directory). runner: runs one argv (default
    subprocess). Rerunning the same command with the same hydra.sweep.dir after the driver died goes on
    from its last decided round (the jobs resume from their checkpoints)."""
    import yaml

    from rlx.report.sweeps import arm_axis
    from rlx.sweep import SWEEPS_DIR, sweep_dir_of

    runner = runner or (lambda cmd: subprocess.run(cmd).returncode)
    arm_key, arms = arm_axis(name)
    if arm_key is None:
        raise ValueError(f"sweep {name!r} has no arm axis (a config group in hydra.sweeper.params)")
    overrides, arms = split_overrides(list(overrides), arm_key, list(arms))
    if not schedule.first_steps:
        full = ((yaml.safe_load((SWEEPS_DIR / f"{name}.yaml").read_text()) or {}).get("train") or {}).get("steps")
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
