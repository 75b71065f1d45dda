"""Per-problem files of a run's evaluations (RUN/eval/step_N/completions.jsonl) in three readings (the task's, lm-eval's
strict-match and flexible-extract: docs/eval.md), and a run's start against its end, paired by problem."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from rlx.eval.paired import paired_gain, verdict
from rlx.run.records import Run

# (metrics.jsonl key, rlx.eval.paired verdict, label)
READINGS = (("val/acc", "passed", "task (stated number)"),
            ("val/strict-match", "strict-match", "lm-eval strict-match"),
            ("val/flexible-extract", "flexible-extract", "lm-eval flexible-extract"))
LABEL = {key: label for key, _, label in READINGS}
PROBLEMS = "completions.jsonl"
TOL = 1e-6  # a file's accuracy vs the logged val/* (the same k/n, so equal up to float noise)


@dataclass
class Problems:
    """One evaluation's greedy verdicts per reading: {reading verdict: {(set, index): passed}}."""

    path: Path
    verdicts: dict[str, dict[tuple[str, int], bool]]
    rows: list[dict] = field(default_factory=list)  # the greedy rows, for the answers' spread (rlx.eval.guess)

    def count(self, by: str) -> tuple[int, int] | None:
        v = self.verdicts.get(by)
        return None if v is None else (sum(v.values()), len(v))

    def acc(self, by: str) -> float | None:
        """As training's val/* is: the unweighted mean over eval sets of each set's accuracy."""
        v = self.verdicts.get(by)
        if v is None:
            return None
        sets: dict[str, list[bool]] = {}
        for (name, _), p in v.items():
            sets.setdefault(name, []).append(p)
        return sum(sum(s) / len(s) for s in sets.values()) / len(sets)


def read_problems(path: Path) -> Problems:
    """The greedy rows of a completions.jsonl (rlx-eval's format), judged in each reading it can be read in."""
    rows = [r for r in (json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip())
            if r.get("kind") == "greedy"]
    if not rows:
        raise ValueError(f"{path}: no greedy completion (rlx-eval and training's evaluations write them)")
    verdicts = {}
    for _, by, _ in READINGS:
        try:
            verdicts[by] = {(r["set"], int(r["index"])): verdict(r, by) for r in rows}
        except (KeyError, TypeError, ValueError):  # a row without that reading or the text to read it from
            continue
    return Problems(Path(path), verdicts, rows)


def resolve_base(path: str | Path) -> Path:
    """--base: a completions.jsonl, a directory holding one (an eval/step_0), or a run directory (its eval/step_0)."""
    p = Path(path)
    for cand in (p, p / PROBLEMS, p / "eval" / "step_0" / PROBLEMS):
        if cand.is_file():
            return cand
    raise ValueError(f"--base {path}: no {PROBLEMS} there (give the file, a run's eval/step_0, or the run)")


def step_file(run: Run, step: int) -> Path | None:
    f = run.path / "eval" / f"step_{step}" / PROBLEMS
    return f if f.is_file() else None


def logged(run: Run, key: str, step: int) -> float | None:
    row = run.by_step(key).get(step)
    v = None if row is None else row[key]
    return float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None


def eval_size(run: Run) -> int | None:
    """Held-out problems per evaluation: task.n_eval, or with n_eval 0 and no eval file task.holdout; else None."""
    n = run.get("task.n_eval")
    if isinstance(n, int) and n > 0:
        return n
    holdout = run.get("task.holdout")
    if n == 0 and run.get("task.eval_path") is None and isinstance(holdout, int) and holdout > 0:
        return holdout
    return None


def check_base(run: Run, base: Problems) -> None:
    """Refuse a --base file that does not score what `run` logged at step 0 (every reading both have)."""
    compared = 0
    for key, by, _ in READINGS:
        want, got = logged(run, key, 0), base.acc(by)
        if want is None or got is None:
            continue
        compared += 1
        if abs(want - got) > TOL:
            k, n = base.count(by)
            raise ValueError(
                f"--base {base.path}: its {by} accuracy {got:.4f} ({k}/{n}) is not the {key} = {want:.4f} that "
                f"{run.name} logged at step 0, so it is not that run's start (another base model, prompt, eval "
                f"set or n_eval?); pass the step-0 completions.jsonl of a run of the same experiment")
    if not compared:
        raise ValueError(f"--base {base.path}: {run.name} logged no step-0 val/* that the file also scores, "
                         f"so the file cannot be checked against it")


@dataclass
class RunResult:
    run: Run
    steps: list[int]  # evaluation steps (val/acc logged)
    start_source: str  # "eval/step_0" | "--base" | "none"
    start_file: Problems | None
    end_file: Problems | None
    readings: dict[str, dict] = field(default_factory=dict)  # metrics key -> start, end, counts, paired
    notes: list[str] = field(default_factory=list)

    @property
    def start(self) -> int:
        return self.steps[0]

    @property
    def end(self) -> int:
        return self.steps[-1]

    @property
    def counted(self) -> bool:
        """Counted over seeds: it has its step-0 evaluation and at least one after it."""
        return len(self.steps) >= 2 and self.steps[0] == 0


def analyse_run(run: Run, base: Problems | None) -> RunResult:
    steps = sorted(run.by_step("val/acc"))
    own = step_file(run, 0)
    res = RunResult(run, steps, "none", None, None)
    if len(steps) < 2 or steps[0] != 0:
        res.notes.append("no step-0 evaluation" if steps and steps[0] != 0 else
                         "no evaluation after step 0" if steps else "no evaluation")
        return res
    if own is not None:
        res.start_source, res.start_file = "eval/step_0", read_problems(own)
    elif base is not None:
        check_base(run, base)
        res.start_source, res.start_file = "--base", base
    end = step_file(run, res.end)
    res.end_file = read_problems(end) if end is not None else None
    n_any = next((f.count(by)[1] for f in (res.end_file, res.start_file) if f for _, by, _ in READINGS
                  if f.count(by)), None) or eval_size(run)
    for f, step in ((res.start_file, res.start), (res.end_file, res.end)):
        if f is None or f is base:
            continue
        for key, by, _ in READINGS:
            want, got = logged(run, key, step), f.acc(by)
            if want is not None and got is not None and abs(want - got) > TOL:
                res.notes.append(f"eval/step_{step}/{PROBLEMS} scores {by} {got:.4f}, metrics.jsonl logged "
                                 f"{key} = {want:.4f} at step {step}")
    for key, by, _ in READINGS:
        cell: dict = {"start": logged(run, key, res.start), "end": logged(run, key, res.end)}
        for side, f in (("start", res.start_file), ("end", res.end_file)):
            kn = f.count(by) if f else None
            if kn is None and cell[side] is not None and n_any:
                kn = (round(cell[side] * n_any), n_any)
            cell[f"{side}_k"], cell[f"{side}_n"] = kn if kn else (None, None)
        cell["paired"], cell["paired_note"] = None, None
        if res.start_file is None:
            cell["paired_note"] = "no per-problem file for step 0: pass --base"
        elif res.end_file is None:
            cell["paired_note"] = f"no per-problem file for step {res.end} (eval/step_{res.end}/{PROBLEMS})"
        elif by not in res.start_file.verdicts or by not in res.end_file.verdicts:
            cell["paired_note"] = f"the per-problem files do not record {by}"
        else:
            try:
                cell["paired"] = paired_gain(res.start_file.verdicts[by], res.end_file.verdicts[by])
            except ValueError as err:
                cell["paired_note"] = str(err)
        res.readings[key] = cell
    return res
