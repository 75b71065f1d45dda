"""The training-side lr choice of `python -m rlx.report.select_lr` and the smollm2_qerl_tuned report
(docs/sweeps.md, "Two-stage tuning"). Held-out metrics (val/*) are never read."""

from __future__ import annotations

import math
import shlex
import statistics
from dataclasses import dataclass, field
from typing import Callable

from rlx.run.records import Run
from rlx.sweeps.spec import arm_axis, arm_settings

METRIC, LAST = "train/reward/mean", 20


def last_mean(run: Run, metric: str = METRIC, last: int = LAST) -> float | None:
    """The mean of `metric` over the run's last `last` logged RL steps (>= 1); None with fewer than `last`."""
    steps, values = run.series(metric)
    values = values[steps >= 1]
    if values.size < last or last < 1:
        return None
    return float(values[-last:].mean())


def lr_of(run: Run) -> float | None:
    lr = run.get("algo.lr")
    return None if lr is None else float(lr)


@dataclass
class LrScore:
    """One lr of one arm: its runs, the finished runs' scores (seed -> score), and the runs without one."""

    lr: float
    runs: list[Run] = field(default_factory=list)
    scores: dict = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # "seed 0: running", "seed 1: 12 of 20 steps logged", "not run"
    notes: list[str] = field(default_factory=list)  # final runs scored -inf: failed or diverged

    @property
    def score(self) -> float | None:
        return statistics.fmean(self.scores.values()) if self.scores else None


@dataclass
class Choice:
    arm: str
    lrs: list[LrScore]  # low to high
    lr: float | None  # None: undecided
    why: str
    arm_choice: str | None = None  # the chosen runs' arm-file value (e.g. lora_nvfp4_lr6e-4), for the stage-2 command

    @property
    def decided(self) -> bool:
        return self.lr is not None


def expected_grid(sweep: str) -> dict[str, list[float]]:
    """{arm: its lrs} of a sweep whose arm files are named `<arm>_lr<lr>`: the grid, launched or not ({}: none)."""
    key, files = arm_axis(sweep)
    if not key:
        return {}
    settings = arm_settings(key)
    grid: dict[str, list[float]] = {}
    for name in files:
        lr = settings.get(name, {}).get("algo.lr")
        if "_lr" in name and lr is not None:
            grid.setdefault(name.rsplit("_lr", 1)[0], []).append(float(lr))
    return {arm: sorted(lrs) for arm, lrs in grid.items()}


def tripwire_note(entry: LrScore) -> str:
    """'; but its training tripwires fired (...)' for a chosen lr whose runs' hack tripwires (rlx.tasks.tripwires)
    passed a threshold, or did not log them; '' otherwise. It says what to read; the choice stays the rule's."""
    from rlx.tasks.tripwires import BASES, HACKS, THRESHOLDS, run_maxima

    fired, unlogged = [], []
    for run in sorted(entry.runs, key=lambda r: str(r.seed)):
        top = run_maxima(run.records)
        for key, v in top.items():
            name = key.removeprefix("train/") + (" - base" if key in BASES else "")
            if v is not None and v > THRESHOLDS[key]:
                fired.append(f"seed {run.seed}: {name} {100 * v:.0f}% > {100 * THRESHOLDS[key]:.0f}%")
        missing = [k.removeprefix("train/") for k in HACKS if not any(k in r for r in run.records)]
        if missing:
            unlogged.append(f"seed {run.seed}: {', '.join(missing)}")
    out = ""
    if fired:
        out += (f"; but its training tripwires fired ({', '.join(fired)}): the training reward that chose it may "
                f"pay for a hack, not for answers; read the run's completions (docs/rewards.md, 'Hack tripwires')")
    if unlogged:
        out += (f"; its runs did not log every tripwire ({'; '.join(unlogged)}: code from before them), so those "
                f"cannot vouch for the choice: read the runs' completions")
    return out


def score_run(entry: LrScore, j: Run, metric: str, last: int) -> None:
    """Add run `j` to its lr's entry: its score, -inf if it failed or diverged, or why it has none yet."""
    entry.runs.append(j)
    if j.failed:
        entry.scores[j.seed] = -math.inf
        entry.notes.append(f"seed {j.seed}: failed ({j.error[:80]}), scored as the worst")
        return
    if not j.ok:
        entry.missing.append(f"seed {j.seed}: {j.status}")
        return
    value = last_mean(j, metric, last)
    if value is not None and not math.isfinite(value):
        entry.scores[j.seed] = -math.inf
        entry.notes.append(f"seed {j.seed}: {metric} not finite (diverged), scored as the worst")
    elif value is None:
        logged = int((j.series(metric)[0] >= 1).sum())
        entry.missing.append(f"seed {j.seed}: {logged} of {last} steps of {metric} logged")
    else:
        entry.scores[j.seed] = value


def choice_reason(lrs: list[LrScore], best: LrScore, metric: str, last: int) -> str:
    """Why `best` won: its score against the others, ties, a grid edge, failed runs and the tripwires."""
    others = ", ".join(f"{s.score:.4f} at {s.lr:g}" for s in lrs if s is not best)
    seeds = sorted({str(sd) for s in lrs for sd in s.scores})
    why = (f"lr {best.lr:g}: mean {metric} over the last {last} steps {best.score:.4f}"
           + (f", against {others}" if others else " (the only lr run)")
           + f" (seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)})")
    tied = len(lrs) > 1 and sum(s.score == best.score for s in lrs) > 1
    if tied and all(s.score == best.score for s in lrs):
        why += (f"; every lr scored {best.score:.4f}: the smaller lr by the tie rule, which the data do not "
                f"support over the others" + (" (no training reward at any lr)" if best.score == 0 else ""))
    elif tied:
        why += "; tied: the smaller lr"
    elif len(lrs) > 2 and best.lr in (lrs[0].lr, lrs[-1].lr):
        why += "; at the edge of the grid: a wider grid may find a better lr that way"
    for s in lrs:
        why += "".join(f"; lr {s.lr:g} {n}" for n in s.notes)
    return why + tripwire_note(best)


def select(jobs: list[Run], arm_of: Callable[[Run], str], metric: str = METRIC, last: int = LAST,
           arm_key: str | None = None, expected: dict[str, list[float]] | None = None) -> dict[str, Choice]:
    """{arm: Choice} over `jobs` by arm_of(job) and algo.lr. arm_key: the arm axis the stage-2 command names.
    expected: {arm: lrs} (expected_grid); an lr of it without a run is "not run", so its arm stays undecided."""
    grouped: dict[str, dict[float, LrScore]] = {}
    for j in jobs:
        lr = lr_of(j)
        if lr is not None:
            score_run(grouped.setdefault(arm_of(j), {}).setdefault(lr, LrScore(lr)), j, metric, last)
    for arm, lrs in (expected or {}).items():
        by_lr = grouped.setdefault(arm, {})
        for lr in lrs:
            if lr not in by_lr:
                by_lr[lr] = LrScore(lr, missing=["not run"])
    out = {}
    for arm, by_lr in grouped.items():
        lrs = [by_lr[k] for k in sorted(by_lr)]
        lacking = [s for s in lrs if s.score is None or s.missing]
        if lacking:
            why = "undecided: " + "; ".join(f"lr {s.lr:g}: " + (", ".join(s.missing) or "no run")
                                            for s in lacking)
            out[arm] = Choice(arm, lrs, None, why)
            continue
        best = max(lrs, key=lambda s: (s.score, -s.lr))  # the highest score; a tie goes to the smaller lr
        why = choice_reason(lrs, best, metric, last)
        arm_choice = None
        if arm_key:
            values = {r.override(arm_key) or r.choices.get(arm_key) for r in best.runs} - {None}
            arm_choice = next(iter(values)) if len(values) == 1 else None
        out[arm] = Choice(arm, lrs, best.lr, why, arm_choice)
    return out


def selection_table(choices: dict[str, Choice], labels: dict[str, str] | None = None, metric: str = METRIC,
                    last: int = LAST) -> list[str]:
    """Markdown: one row per (arm, lr) with the score per seed and over seeds, the chosen lr marked."""
    from rlx.report.tables import md_table

    labels = labels or {}
    rows = []
    for arm, c in choices.items():
        for s in c.lrs:
            per_seed = ", ".join(f"{sd}: {v:.4f}" for sd, v in sorted(s.scores.items(), key=lambda kv: str(kv[0])))
            rows.append([labels.get(arm, arm), f"{s.lr:g}", per_seed or "–",
                         "–" if s.score is None else f"{s.score:.4f}", "; ".join(s.missing) or "",
                         "**chosen**" if c.lr == s.lr else ""])
    head = [f"Each arm's lr chosen on the training side: the mean of {metric} over each run's last {last} "
            f"steps (the reward of the rollouts it trained on), averaged over seeds; the highest wins, a tie "
            f"goes to the smaller lr. Held-out accuracy is never read for the choice.", ""]
    return head + md_table(["arm", "lr", f"last-{last} mean per seed", "over seeds", "missing", ""], rows) + [
        ""] + [f"- {labels.get(a, a)}: {c.why}" for a, c in choices.items()]


def stage2_command(choices: dict[str, Choice], sweep: str, arm_key: str, stage2_dir: str,
                   seeds: str = "1,2,3") -> str | None:
    """`python -m rlx.sweeps SWEEP ... ARM_KEY=<chosen arm files> seed=SEEDS` (None until every arm is decided)."""
    if not choices or not all(c.decided and c.arm_choice for c in choices.values()):
        return None
    arms = ",".join(c.arm_choice for c in choices.values())
    return " ".join(["python -m rlx.sweeps", sweep, "hydra/launcher=joblib", "trainer.threads=1",
                     shlex.quote(f"hydra.sweep.dir={stage2_dir}"), f"seed={seeds}", f"{arm_key}={arms}"])


def stages(jobs: list[Run]) -> tuple[list[Run], list[Run]]:
    """(stage 1: seed 0, the lr sweep; stage 2: every other seed, fresh runs at the chosen lrs)."""
    return [j for j in jobs if j.seed == 0], [j for j in jobs if j.seed != 0]


def at_chosen_lr(arms: dict[str, list[Run]], sweep: str) -> tuple[dict[str, list[Run]], dict]:
    """({arm: the runs its tables count}, the choices) of a two-stage tuning sweep; an undecided arm is left out
    (docs/sweeps.md, "Two-stage tuning")."""
    jobs = [j for js in arms.values() for j in js]
    first, second = stages(jobs)
    if first:
        choices = select(first, lambda j: j.arm, arm_key=arm_axis(sweep)[0], expected=expected_grid(sweep))
    else:
        choices = select(second, lambda j: j.arm, arm_key=arm_axis(sweep)[0])
    kept = {}
    for arm, js in arms.items():
        later = [j for j in js if j.seed != 0]
        lrs = {lr_of(j) for j in later}
        if later and not first and len(lrs) == 1:
            kept[arm] = later  # stage 2 alone: its one lr, finished or not
        elif arm in choices and choices[arm].decided:
            pool = later or [j for j in js if j.seed == 0]
            kept[arm] = [j for j in pool if lr_of(j) == choices[arm].lr]
    return {a: js for a, js in kept.items() if js}, choices
