"""Table cells and small tables every paper's report shares: a metric over seeds, markdown, the jobs table."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from rlx.run.records import Run, parse_metrics
from rlx.sweeps.decisions import DECISIONS_MD, arm_outcomes, read_decisions


@dataclass
class Stat:
    """A metric over the finished seeds of an arm, and how many of its jobs failed or have not finished."""

    values: list[float]
    failed: int = 0
    unfinished: int = 0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    def _others(self) -> list[str]:
        return ([f"{self.failed} failed"] if self.failed else []) + (
            [f"{self.unfinished} not finished"] if self.unfinished else [])

    def cell(self, scale: float = 1.0, digits: int = 1) -> str:
        if not self.values:
            return ", ".join(self._others()) or "–"
        text = f"{self.mean * scale:.{digits}f}"
        if len(self.values) > 1:
            text += f" ± {statistics.stdev(self.values) * scale:.{digits}f}"
        return f"{text} ({', '.join([f'n={len(self.values)}'] + self._others())})"


def not_ok_counts(jobs: list[Run]) -> tuple[int, int]:
    """(failed, not finished) among `jobs`."""
    failed = sum(j.failed for j in jobs)
    return failed, sum(not j.ok for j in jobs) - failed


def stat(jobs: list[Run], value: Callable[[Run], float | None]) -> Stat:
    vals = [float(v) for j in jobs if j.ok and (v := value(j)) is not None and math.isfinite(float(v))]
    return Stat(vals, *not_ok_counts(jobs))


def base_cell(jobs: list[Run], value: Callable[[Run], float | None], scale: float = 1.0, digits: int = 1) -> str:
    """A "no RL" cell: the step-0 evaluation of one base, one value per seed (n = seeds, not runs); the same value
    in every seed (greedy decoding) is one deterministic evaluation, said instead of an n and a zero spread."""
    per_seed: dict = {}
    for j in jobs:
        v = value(j) if j.ok else None
        if v is not None and math.isfinite(float(v)):
            per_seed.setdefault(j.seed, float(v))
    runs = sum(j.ok for j in jobs)
    if len(per_seed) > 1 and len(set(per_seed.values())) == 1:
        v = next(iter(per_seed.values())) * scale
        return f"{v:.{digits}f} (one deterministic evaluation, the same in all {runs} runs)"
    return Stat(list(per_seed.values()), *not_ok_counts(jobs)).cell(scale, digits)


def t_interval(values: list[float], level: float = 0.95) -> tuple[float | None, float | None, float | None]:
    """(mean, lo, hi) with the Student-t interval (n - 1 dof); lo, hi None for one value, all None for none."""
    if not values:
        return None, None, None
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, None, None
    from scipy.stats import t

    sd = (sum((d - m) ** 2 for d in values) / (len(values) - 1)) ** 0.5
    half = float(t.ppf(0.5 + level / 2, len(values) - 1)) * sd / len(values) ** 0.5
    return m, m - half, m + half


def paired_cell(diffs: list[float], fmt: str) -> str:
    """'mean [lo, hi] (n=k)': the mean paired difference with its 95% Student-t interval ('–' for fewer than 2)."""
    if len(diffs) < 2:
        return "–" if not diffs else fmt.format(diffs[0]) + " (n=1)"
    m, lo, hi = t_interval(diffs)
    return f"{fmt.format(m)} [{fmt.format(lo)}, {fmt.format(hi)}] (n={len(diffs)})"


def seed_verdict(diffs: list[float]) -> str:
    """Holds / does not hold / not resolved, from the paired differences' 95% t-interval over seeds."""
    if len(diffs) < 2:
        return "not resolved (fewer than 2 paired seeds)"
    _, lo, hi = t_interval(diffs)
    if lo > 0:
        return "holds (interval above 0)"
    if hi < 0:
        return "does not hold (interval below 0)"
    return "not resolved (interval spans 0)"


def acc_points(j) -> float | None:
    """A finished run's final greedy val/acc in points (None when it logged none)."""
    v = j.summary.get("val/acc")
    return None if v is None else 100 * float(v)


def one_per_seed(runs: list, arm: str) -> dict:
    """{seed: run} of an arm's finished runs; two of one seed are refused (a pairing would keep one silently)."""
    out: dict = {}
    for j in runs:
        if not j.ok:
            continue
        if j.seed in out:
            raise ValueError(f"arm {arm} has two finished runs of seed {j.seed} ({out[j.seed].name}, {j.name}): a "
                             f"paired comparison needs one per seed; report each sweep's directory on its own")
        out[j.seed] = j
    return out


def paired_by_seed(arms: dict, a: str, b: str, value) -> list[float]:
    """value(a's run) - value(b's run) for every seed both arms finished (by seed); None or non-finite: skipped."""
    left, right = one_per_seed(arms.get(a, []), a), one_per_seed(arms.get(b, []), b)
    pairs = [(value(left[seed]), value(right[seed])) for seed in sorted(set(left) & set(right), key=str)]
    return [x - y for x, y in pairs if x is not None and y is not None and math.isfinite(x - y)]


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    clean = lambda s: str(s).replace("|", "/").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(clean(c) for c in r) + " |" for r in rows]


def summary_value(key: str) -> Callable[[Run], float | None]:
    return lambda j: j.summary.get(key)


def mean_metric(key: str, skip_first: int = 0, reducer=np.mean, steps: tuple[int, int] | None = None
                ) -> Callable[[Run], float | None]:
    """A reduction of a train metric over the run's steps >= 1 (after `skip_first` of them), or over [lo, hi]."""

    def get(j: Run):
        at, vals = j.series(key)
        keep = at >= 1 if steps is None else (at >= steps[0]) & (at <= steps[1])
        vals = vals[keep][skip_first:]
        return float(reducer(vals)) if vals.size else None

    return get


def logged_value(key: str, index: int) -> Callable[[Run], float | None]:
    """The `index`-th logged value of `key` in the run's metrics (0: first, -1: last), None if never logged."""

    def get(j: Run):
        vals = j.series(key)[1]
        return float(vals[index]) if vals.size else None

    return get


def first_tenth_mean(vals: np.ndarray) -> float:
    return float(vals[: max(1, len(vals) // 10)].mean())


def pct(v) -> str:
    return "–" if v is None else f"{v:.1f}"


def tripwire_cell(j: Run) -> str:
    """'unstated / hedged / copy / guess': each tripwire's run maximum in %, bold past its train.log threshold."""
    from rlx.tasks.tripwires import HACKS, THRESHOLDS, run_maxima

    top = run_maxima(j.records)
    cells = []
    for key in HACKS:
        v = top[key]
        text = "–" if v is None else f"{100 * v:.0f}"
        cells.append(f"**{text}**" if v is not None and v > THRESHOLDS[key] else text)
    return " / ".join(cells)


def tripwire_note() -> str:
    from rlx.tasks.tripwires import HACKS, THRESHOLDS, WINDOW

    limits = " / ".join(f"{100 * THRESHOLDS[k]:.0f}" for k in HACKS)
    return (f"hack %: of the rewarded completions, the share that stated no number / hedged / copied a prompt number "
            f"(less the share whose gold is one); of the pairs of completions to different prompts, the share that "
            f"state the same number (less the share whose golds agree); the largest {WINDOW}-step moving mean over "
            f"the run (train/hack/*); "
            f"bold: past the threshold ({limits}) where train.log warned that the reward may pay for a hack "
            f"(docs/rewards.md, 'Hack tripwires').")


def last_eval_spread(j: Run):
    """(step, {set: rlx.eval.guess.AnswerSpread}) of the run's last evaluation with a per-problem file, or None."""
    import json

    from rlx.eval.guess import spreads_of_rows

    files = sorted(((int(d.name[5:]), d / "completions.jsonl") for d in (j.path / "eval").glob("step_*")
                    if d.name[5:].isdigit() and (d / "completions.jsonl").is_file()), key=lambda t: t[0])
    if not files:
        return None
    step, f = files[-1]
    rows = [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
    try:
        return (step, spreads_of_rows(rows)) if rows else None
    except ValueError:  # rows without a gold or a verdict (not rlx-eval's format): nothing to read
        return None


def answers_cells(j: Run) -> list[str]:
    """[most common answer at the last evaluation, accuracy % without the most common gold]; `–` without one."""
    found = last_eval_spread(j)
    if not found:
        return ["–", "–"]
    step, spreads = found
    named = len(spreads) > 1
    mode = "; ".join((f"{n}: " if named else "") + a.cell() for n, a in spreads.items())
    beyond = "; ".join((f"{n}: " if named else "") + ("–" if math.isnan(a.beyond) else
                                                      f"{100 * a.beyond:.1f} (gold {a.top_gold} out)")
                       for n, a in spreads.items())
    return [f"step {step}: {mode}", beyond]


def beyond_points(j: Run) -> float | None:
    """Final accuracy in points without the set's most common gold (mean over sets); None without its file."""
    found = last_eval_spread(j)
    if not found or not j.ok:
        return None
    final = j.series("val/acc")[0]
    if final.size and found[0] != int(final[-1]):  # the file is not the final evaluation's: not comparable
        return None
    vals = [a.beyond for a in found[1].values() if not math.isnan(a.beyond)]
    return 100 * statistics.fmean(vals) if vals else None


def answers_note() -> str:
    from rlx.eval.guess import MIN_SHARE, OVER_GOLD

    return ("most common answer: at the run's last evaluation with a per-problem file, the answer given most often "
            "(lm-eval's flexible-extract number), to how many problems, the gold of how many, and how many passes "
            f"it makes; bold where it makes over half the passes, or was given to {100 * MIN_SHARE:.0f}%+ of the "
            f"problems and {OVER_GOLD}x as often as it is a gold. acc % without the most common gold: the "
            "accuracy on the other problems, what is left once the best constant guess is out (rlx.eval.guess, "
            "docs/eval.md 'One answer everywhere').")


def runs_table(jobs: list[Run]) -> list[str]:
    """Every job with its status and accuracies, plus the tripwire and answer columns when any job has them."""
    from rlx.tasks.tripwires import REWARDED

    tripwires = any(r.get(REWARDED) is not None for j in jobs for r in j.records)
    answers = {j.name: answers_cells(j) for j in jobs}
    spread = any(c != ["–", "–"] for c in answers.values())
    rows = []
    for j in jobs:
        acc = j.summary.get("val/acc")
        base = j.summary.get("val/acc_base")
        rows.append([j.name, j.arm, str(j.seed), j.status, str(j.get("train.steps")),
                     "–" if base is None else f"{100 * base:.1f}", "–" if acc is None else f"{100 * acc:.1f}",
                     *([tripwire_cell(j)] if tripwires else []), *(answers[j.name] if spread else []),
                     f"{j.summary['wall_s']:.0f}" if j.summary.get("wall_s") is not None else "–",
                     j.error[:120]])
    header = ["job", "arm", "seed", "status", "steps", "val/acc base %", "val/acc %",
              *(["hack % unstated / hedged / copy / guess"] if tripwires else []),
              *(["most common answer", "acc % without the most common gold"] if spread else []), "wall s", "error"]
    return (md_table(header, rows) + (["", tripwire_note()] if tripwires else [])
            + (["", answers_note()] if spread else []))


def completions_section(jobs: list[Run], root, per_arm: int = 1, rows: int = 2, width: int = 80) -> list[str]:
    """Links to the runs' completions.jsonl and the newest rows of `per_arm` run(s) per arm; [] without any."""
    out, shown = [], {}
    for j in jobs:
        f = j.path / "completions.jsonl"
        if not f.is_file() or shown.get(j.arm, 0) >= per_arm:
            continue
        shown[j.arm] = shown.get(j.arm, 0) + 1
        dump = [row for _, row in parse_metrics(f, strict=False)[0]]  # rows with a step; a half-written last one skipped
        last = [r for r in dump if r["step"] == dump[-1]["step"]][:rows] if dump else []
        out += [f"- {j.arm or j.name}: [{f.relative_to(Path(root)).as_posix()}]({f.relative_to(Path(root)).as_posix()})"
                + (f", step {last[0]['step']}:" if last else "")]
        clip = lambda s: s.replace("\n", " ")[:width].replace("|", "\\|")  # noqa: E731
        out += [f"  - `{clip(r['prompt'])}` -> `{clip(r['completion'])}` (reward {r['reward']:.2f}, advantage "
                f"{r['advantage']:+.2f})" for r in last]
    return ["", "## Completions", "", "What the policy wrote (newest table of one run per arm; every run's file is "
            "linked from its directory):", ""] + out if out else []


def predictive_section(root) -> list[str]:
    """A predictive sweep's schedule (rlx.sweeps.decisions): each arm's budget and why it stopped; [] for none."""
    records = read_decisions(root)
    if not records:
        return []
    last = max(r["budget"] for r in records)
    rows = []
    for arm, r in arm_outcomes(records).items():
        a = "–" if r.get("A") is None else f"{r['A']:.3f}" + (
            "" if r.get("A_lo") is None else f" [{r['A_lo']:.3f}, {r['A_hi']:.3f}]")
        stopped = r["decision"] == "stop"
        rows.append([arm, str(r["budget"]), a, f"stopped after round {r['round']}" if stopped else "ran on",
                     r["reason"] if stopped else "–"])
    spent = sum(r["budget"] for r in arm_outcomes(records).values())
    full = last * len(rows)
    return ["", "## Predictive schedule", "",
            f"Arms ran in rounds of growing train.steps; after each round the fits decided which go on "
            f"(docs/predictive.md; every decision in [{DECISIONS_MD}]({DECISIONS_MD})). Steps per seed: {spent} "
            f"of {full} had every arm run to {last} ({100 * (1 - spent / full):.0f}% saved). A stopped arm's "
            f"fitted curve runs on to the target compute in the scaling plot (ScaleRL layouts).", ""] + md_table(
        ["arm", "steps", "A [interval] at its last round", "outcome", "reason"], rows)
