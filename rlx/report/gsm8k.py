"""The real-GSM8K runs (conf/experiment/smollm2_gsm8k.yaml; issue 43 items 3 and 5): one run directory per seed
under DIR, reported as a paper would: held-out accuracy at the start and the end in three readings, per seed with
the paired per-problem interval and over seeds with the t-interval, the curves, and ScaleRL's predictability (a
sigmoid fitted on the first half of each run's compute, judged on the second half).

    python -m rlx.report DIR --layout smollm2_gsm8k [--base PATH]

The three readings of the same greedy completions (rlx.tasks.readings, docs/eval.md): the task's own verdict
(`val/acc`, the stated-number rule its rewards pay), lm-eval's GSM8K `strict-match` and `flexible-extract`.
Per-problem verdicts come from RUN/eval/step_N/completions.jsonl (training's evaluations write them since commit
efb75a8); a run started before that has none for step 0, and `--base` (a completions.jsonl, or a directory holding
one, e.g. another seed's eval/step_0) stands in for it: the step-0 evaluation is deterministic greedy decoding of
the same SFT base in every seed, and the file is refused unless it scores exactly what that run logged at step 0.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlx.eval.paired import paired_gain, verdict
from rlx.report.tables import md_table, runs_table, t_interval
from rlx.run.records import Run

LAYOUT = "smollm2_gsm8k"
TITLE = "SmolLM2-135M on {task}{env} ({start})"  # filled from the runs' configs: title()
# (metrics.jsonl key, rlx.eval.paired verdict, label)
READINGS = (("val/acc", "passed", "task (stated number)"),
            ("val/strict-match", "strict-match", "lm-eval strict-match"),
            ("val/flexible-extract", "flexible-extract", "lm-eval flexible-extract"))
LABEL = {key: label for key, _, label in READINGS}
FIT_METRICS = ("val/flexible-extract", "val/acc")  # held-out readings fitted (ScaleRL's y axis is held out)
TRAIN_REWARD = "train/reward/mean"
FIT_FRACTION = 0.5  # ScaleRL: fit the first half of the compute, predict the second
PROBLEMS = "completions.jsonl"
TOL = 1e-6  # a file's accuracy vs the logged val/* (the same k/n, so equal up to float noise)


# ---- per-problem files ---------------------------------------------------------------------------

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
    """Held-out problems per evaluation from the config: task.n_eval, or (n_eval 0: all) the carved-out
    task.holdout slice when there is no eval file; None when the config does not say."""
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


# ---- one run -------------------------------------------------------------------------------------

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


# ---- predictability (ScaleRL, issue 43 item 5) ---------------------------------------------------------

def run_scaling(run: Run):
    """The run's own scaling config (fit defaulting to sigmoid) with ScaleRL's fit fraction."""
    from rlx.sweeps.points import scaling_config

    return dataclasses.replace(scaling_config([run]), fit="sigmoid", fit_fraction=FIT_FRACTION)


def predictability(run: Run, metric: str, compute: str | None = None) -> tuple[dict, tuple | None]:
    """Fit the sigmoid to `metric` on the first half of the run's compute (x = perf/compute/<scaling.compute>,
    as rlx-fit, or `compute` when given: "steps" makes the x axis RL steps; R0 = the step-0 evaluation) and
    predict the held-out second half. Returns (the JSON row, (x, y,
    fit) or None): the row gives a reason instead of a fit when none is possible. metric = train/reward/mean:
    x = RL updates before the step's rollouts (step - 1), so step 1's reward (rollouts of the initial policy) is
    R0; the training rows carry no compute counter."""
    from rlx.scaling.fitting import fit_points
    from rlx.scaling.grouping import evaluations, pool

    cfg = run_scaling(run)
    train = metric == TRAIN_REWARD
    cfg = dataclasses.replace(cfg, metric=metric, compute="steps" if train else (compute or cfg.compute))
    out: dict = {"run": run.name, "seed": run.seed, "metric": metric,
                 "x": "RL updates (step - 1)" if train else f"perf/compute/{cfg.compute}",
                 "fit_fraction": cfg.fit_fraction, "min_points": cfg.min_points, "fit": None, "reason": None,
                 "fit_steps": [], "heldout_steps": [], "heldout": []}
    try:
        series = evaluations(run, metric, cfg.compute)
        if train:
            step, x, y = series.step, series.step - 1.0, series.reward
            if not (step == 1).any():
                raise ValueError("no step-1 reward to anchor R0")
            r0 = float(y[step == 1][0])
            keep = x > 0
            step, x, y = step[keep], x[keep], y[keep]
        else:
            x, y, r0 = pool([series])
            step = series.step[series.step > 0] if series.r0 is not None else series.step
        if not x.size:
            raise ValueError("no point after the start")
        cut = cfg.fit_fraction * float(x.max())
        first, held = x <= cut, x > cut
        out["fit_steps"] = step[first].astype(int).tolist()
        out["heldout_steps"] = step[held].astype(int).tolist()
        out["cut"] = cut
        if not held.any():
            raise ValueError("no held-out point to predict")
        need = max(cfg.min_points, 4)  # rlx.scaling.curves.fit_window: min_points, and one more than 3 parameters
        if first.sum() < need and cfg.exclude_before <= 0 and cfg.exclude_fraction <= 0:
            raise ValueError(
                f"the first half ({out['x']} <= {cut:.3g}) holds {int(first.sum())} evaluation(s) after the start "
                f"(the start fixes R0), a 3-parameter sigmoid needs at least {need} (scaling.min_points "
                f"{cfg.min_points}): more evaluations in the first half, or a longer run")
        fit = fit_points(x, y, cfg, r0=r0)
    except ValueError as err:
        out["reason"] = str(err)
        return out, None
    lo = hi = None
    if fit.samples is not None and len(fit.samples):
        lo, hi = fit.band(x[held])
    pred = fit.predict(x[held])
    for i, (s, c, m, p) in enumerate(zip(step[held], x[held], y[held], pred)):
        row = {"step": int(s), "x": float(c), "measured": float(m), "predicted": float(p)}
        if lo is not None:
            row.update(lo=float(lo[i]), hi=float(hi[i]), inside=bool(lo[i] - 1e-9 <= m <= hi[i] + 1e-9))
        out["heldout"].append(row)
    out["fit"] = {"params": fit.params, "intervals": {k: list(v) for k, v in fit.intervals.items()},
                  "R0": float(fit.R0), "n_points": fit.n_points, "confidence": fit.confidence,
                  "A_at_edge": bool(fit.A_at_edge), "rmse": float(np.sqrt(fit.sse / max(fit.n_points, 1))),
                  "heldout_mae": float(np.mean(np.abs(pred - y[held])))}
    return out, (x, y, fit)


def _iv(fit: dict, k: str, fmt: str) -> str:
    v, iv = fit["params"][k], fit["intervals"].get(k)
    return fmt.format(v) + (f" [{fmt.format(iv[0])}, {fmt.format(iv[1])}]" if iv else "")


def step_list(steps: list[int]) -> str:
    """"10, 15"; a run of 4 or more consecutive steps as "2-15"."""
    out, i = [], 0
    while i < len(steps):
        j = i
        while j + 1 < len(steps) and steps[j + 1] == steps[j] + 1:
            j += 1
        out += [f"{steps[i]}-{steps[j]}"] if j - i >= 3 else [str(s) for s in steps[i:j + 1]]
        i = j + 1
    return ", ".join(out) or "none"


def fit_row(r: dict) -> list[str]:
    first = step_list(r["fit_steps"])
    head = [str(r["seed"]), first]
    if r["fit"] is None:
        return head + [f"no fit: {r['reason']}"] + ["–"] * 7
    f, last = r["fit"], r["heldout"][-1]
    a = _iv(f, "A", "{:.3f}") + (" (A at its grid edge: undetermined)" if f["A_at_edge"] else "")
    band = f" [{last['lo']:.3f}, {last['hi']:.3f}]" if "lo" in last else ""
    inside = "–" if "inside" not in last else "yes" if last["inside"] else "**no**"
    return head + [a, _iv(f, "B", "{:.2f}"), _iv(f, "C_mid", "{:.3g}"), f"{f['R0']:.3f}",
                   f"step {last['step']}: {last['predicted']:.3f}{band}", f"{last['measured']:.3f}",
                   f"{last['predicted'] - last['measured']:+.3f} (mean abs over {len(r['heldout'])} held out: "
                   f"{f['heldout_mae']:.3f})", inside]


FIT_HEADER = ["seed", "fitted steps (first half)", "A [95%]", "B [95%]", "C_mid [95%]", "R0",
              "predicted at the last point [95% band]", "measured", "predicted - measured", "inside the band"]


# ---- the constant-guess baseline (rlx.eval.guess) --------------------------------------------------------

def _sets_of(rows: list[dict]) -> dict[str, list[dict]]:
    by_set: dict[str, list[dict]] = {}
    for r in rows:
        by_set.setdefault(str(r.get("set", "default")), []).append(r)
    return by_set


def guess_section(counted: list[RunResult], doc: dict) -> list[str]:
    """What answering one number everywhere scores on these held-out problems (the set's most common gold, as
    the word-problem reports show it), and each per-problem file's most common answer and accuracy without that
    gold; nothing when no file records golds (files from before rlx-eval wrote them)."""
    from rlx.eval.guess import best_constant, spreads_of_rows

    files = [(r, side, f) for r in counted for side, f in (("start", r.start_file), ("end", r.end_file))
             if f is not None and f.rows and all("gold" in row for row in f.rows)]
    if not files:
        return []
    shares = {}  # set -> (the most common gold, problems it is the gold of, problems)
    for name, rows in _sets_of(files[0][2].rows).items():
        answer, k = best_constant([str(row["gold"]) for row in rows])
        shares[name] = (answer, k, len(rows))
    doc["constant_guess"] = {name: {"answer": a, "problems": k, "n": n, "acc": k / n}
                             for name, (a, k, n) in shares.items()}
    named = len(shares) > 1
    said = "; ".join((f"{name}: " if named else "") + f"**{a}** is the gold of {k} of {n} problems, so answering "
                     f"{a} everywhere scores **{100 * k / n:.1f}%**" for name, (a, k, n) in shares.items())
    lines = ["## The constant-guess baseline", "",
             f"The held-out set's most common gold (rlx.eval.guess, docs/eval.md 'One answer everywhere'): {said} in "
             f"every reading (the task's, and lm-eval's when written `#### {next(iter(shares.values()))[0]}`), "
             f"without solving any problem: an accuracy near it is no evidence of solving. Per evaluation with a per-problem "
             f"file: the answer given most often (lm-eval's flexible-extract number; bold where it makes over half "
             f"the passes, or was given to 15%+ of the problems and twice as often as it is a gold), and the task's "
             f"accuracy on the problems whose gold is not the most common one.", ""]
    rows, doc["answers"] = [], []
    for r, side, f in files:
        step = r.start if side == "start" else r.end
        for name, a in spreads_of_rows(f.rows).items():
            beyond = "–" if math.isnan(a.beyond) else f"{100 * a.beyond:.1f} (gold {a.top_gold} out)"
            rows.append([str(r.run.seed), f"step {step}" + (f", {name}" if named else ""), a.cell(), beyond])
            doc["answers"].append({"run": r.run.name, "seed": r.run.seed, "step": step, "set": name, **a.as_dict()})
    return lines + md_table(["seed", "evaluation", "most common answer", "task acc % without the most common gold"],
                            rows) + [""]


# ---- the report ----------------------------------------------------------------------------------

def pct_count(acc: float | None, k, n) -> str:
    if acc is None:
        return "–"
    return f"{100 * acc:.1f}" + (f" ({k}/{n})" if k is not None and n else "")


def paired_text(cell: dict) -> tuple[str, str]:
    g = cell["paired"]
    if g is None:
        return f"– ({cell['paired_note']})", "–"
    return f"{g['gain']:+.1f} [{g['low']:+.1f}, {g['high']:+.1f}] (n={g['n']})", f"{g['gained']} / {g['lost']}"


def plot_gsm8k(results: list[RunResult], path: Path) -> Path | None:
    """Held-out task / strict-match / flexible-extract accuracy and train reward against the step, per seed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from rlx.report.plots import _smooth, label_panels

    panels = [(key, f"held-out {LABEL[key]} (%)") for key, _, _ in READINGS] + [
        (TRAIN_REWARD, "train reward (thin: raw; thick: 5-step moving mean)")]
    fig = Figure(figsize=(18, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels))
    drawn = False
    for i, r in enumerate(results):
        color, label = f"C{i % 10}", f"seed {r.run.seed} ({r.run.name})"
        for ax, (key, _) in zip(axes, panels):
            s, v = r.run.series(key)
            if not s.size:
                continue
            drawn = True
            if key == TRAIN_REWARD:
                ax.plot(s, v, color=color, lw=0.6, alpha=0.35)
                ax.plot(s, _smooth(v, 5), color=color, lw=1.6, label=label)
            else:
                ax.plot(s, 100 * v, color=color, lw=1.4, marker="o", ms=3, label=label)
    if not drawn:
        return None
    label_panels(axes, panels)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def title(jobs: list[Run]) -> str:
    """What the runs are, from their configs: the task (GSM8K when its files are GSM8K's), an environment,
    and where RL started (an SFT warm start or the pretrained model)."""
    def task(j: Run) -> str:
        name = str(j.get("task.name") or "?")
        paths = " ".join(str(j.get(k) or "") for k in ("task.train_path", "task.eval_path")).lower()
        if name == "gsm8k" or "gsm8k" in paths:
            return "real GSM8K"
        return {"wordproblems": "rlx's word problems"}.get(name, f"task={name}")

    tasks = sorted({task(j) for j in jobs}) or ["?"]
    envs = sorted({str(j.get("env.name")) for j in jobs} - {"None", "none"})
    sft = {bool(j.get("model.sft.data")) for j in jobs}
    start = {frozenset({True}): "SFT, then RL", frozenset({False}): "RL from the pretrained model"}.get(
        frozenset(sft), "some runs from an SFT warm start")
    return TITLE.format(task=" / ".join(tasks), env=f", env={', '.join(envs)}" if envs else "", start=start)


def gsm8k_report(root: Path, jobs: list[Run], plots: bool = True, base: str | Path | None = None
                 ) -> tuple[str, list[Path], dict]:
    """(markdown, PNG paths, the JSON document) for the runs under root; nothing is written but the PNGs."""
    base_file = read_problems(resolve_base(base)) if base is not None else None
    for j in jobs:
        j.arm = LAYOUT
    jobs = sorted(jobs, key=lambda j: (j.seed is None, j.seed if isinstance(j.seed, int) else 0, j.name))
    results = [analyse_run(j, base_file) for j in jobs]
    counted = [r for r in results if r.counted]
    seeds = [r.run.seed for r in counted]
    doc: dict = {"layout": LAYOUT, "root": str(root), "base": None if base_file is None else str(base_file.path),
                 "runs": [], "over_seeds": {}, "predictability": [], "pngs": []}

    lines = [f"# {title(jobs)}: `{root}`", "",
             f"{len(jobs)} run directories; {len(counted)} counted (a step-0 evaluation and at least one after it), "
             f"seeds {', '.join(map(str, seeds)) or '–'}; {sum(r.run.ok for r in counted)} of them finished."]
    skipped = [r for r in results if not r.counted]
    if skipped:
        lines += ["Not counted: " + "; ".join(f"`{r.run.name}` ({', '.join(r.notes)})" for r in skipped) + "."]
    if len(set(seeds)) < len(seeds):
        lines += ["**Warning: several counted runs share a seed**: they are counted as separate seeds below."]
    unfinished = [r.run.name for r in counted if not r.run.ok]
    if unfinished:
        lines += [f"Not finished ({', '.join(unfinished)}): their end is their last evaluation so far."]
    from_base = [r.run.name for r in counted if r.start_source == "--base"]
    no_start = [r.run.name for r in counted if r.start_source == "none"]
    if no_start:
        lines += [f"No per-problem file for step 0 in {', '.join(no_start)} (started before training's evaluations "
                  f"wrote them, commit efb75a8): their paired intervals need `--base` (another seed's "
                  f"eval/step_0, checked against their logged step-0 val/*)."]
    if from_base:
        lines += ["", f"**Start from --base.** {', '.join(from_base)} have no per-problem file for step 0 (started "
                  f"before training's evaluations wrote them, commit efb75a8); their start's per-problem verdicts "
                  f"are `{base_file.path}`. The step-0 evaluation is deterministic greedy decoding of the same SFT "
                  f"base in every seed, and this file scores exactly the step-0 val/* each of these runs logged "
                  f"(checked; a file that does not is refused)."]
    lines += [""]

    # 1. per seed
    lines += ["## Held-out accuracy per seed: start (step 0) and end (last evaluation)", "",
              "Greedy accuracy on the held-out problems in three readings of the same completions: the task's "
              "(`val/acc`, the stated-number rule the rewards pay), lm-eval's GSM8K strict-match and "
              "flexible-extract; % (k/n). end - start is the paired per-problem difference in points with its 95% "
              "interval (rlx.eval.paired: d_i = passed_end(i) - passed_start(i), mean +- 1.96 sd / sqrt(n)); "
              "gained / lost: problems passed only at the end / only at the start.", ""]
    rows = []
    for r in counted:
        for key, _, label in READINGS:
            c = r.readings[key]
            gain, gl = paired_text(c)
            rows.append([str(r.run.seed), label, pct_count(c["start"], c["start_k"], c["start_n"]),
                         f"step {r.end}: " + pct_count(c["end"], c["end_k"], c["end_n"]), gain, gl,
                         r.start_source])
        doc["runs"].append({"name": r.run.name, "seed": r.run.seed, "status": r.run.status, "steps": r.steps,
                            "start_step": r.start, "end_step": r.end, "start_source": r.start_source,
                            "start_file": None if r.start_file is None else str(r.start_file.path),
                            "end_file": None if r.end_file is None else str(r.end_file.path),
                            "readings": r.readings, "notes": r.notes})
    lines += md_table(["seed", "reading", "start (%)", "end (%)", "end - start (points) [paired 95%]",
                       "gained / lost", "start's per-problem file"], rows) + [""]
    notes = [f"- `{r.run.name}`: {n}" for r in counted for n in r.notes]
    if notes:
        lines += ["Per-problem files that disagree with metrics.jsonl:", ""] + notes + [""]

    # 2. over seeds
    lines += ["## Over seeds", "",
              "Mean start and end accuracy over the counted seeds, and the per-seed gains (end - start, points) "
              "with their 95% Student-t interval (n - 1 degrees of freedom).", ""]
    rows = []
    for key, _, label in READINGS:
        pairs = [(r.readings[key]["start"], r.readings[key]["end"]) for r in counted]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        gains = [100 * (b - a) for a, b in pairs]
        mean, lo, hi = t_interval(gains)
        summary = {"n": len(pairs), "start_mean": float(np.mean([a for a, _ in pairs])) if pairs else None,
                   "end_mean": float(np.mean([b for _, b in pairs])) if pairs else None, "gains": gains,
                   "gain_mean": mean, "gain_lo": lo, "gain_hi": hi}
        doc["over_seeds"][key] = summary
        gain_cell = ("–" if mean is None else f"{mean:+.1f}" + (
            f" [{lo:+.1f}, {hi:+.1f}]" if lo is not None else " (one seed: no interval)"))
        rows.append([label, str(len(pairs)), "–" if not pairs else f"{100 * summary['start_mean']:.1f}",
                     "–" if not pairs else f"{100 * summary['end_mean']:.1f}", gain_cell,
                     ", ".join(f"{g:+.1f}" for g in gains) or "–"])
    lines += md_table(["reading", "seeds", "start, mean (%)", "end, mean (%)", "end - start (points) [95% t]",
                       "per-seed gains"], rows) + [""]

    lines += guess_section(counted, doc)

    # 4. predictability
    fitted = {m: [] for m in FIT_METRICS}
    if counted:
        cfg = run_scaling(counted[0].run)
        lines += ["## Predictability (ScaleRL)", "",
                  f"ScaleRL's check that a run's curve is predictable: the sigmoid R(C) = R0 + (A - R0) / (1 + "
                  f"(C_mid / C)^B) fitted by rlx.scaling (as `python -m rlx.scaling fit RUN --fit-fraction "
                  f"{FIT_FRACTION:g}`) on each run's evaluations with compute <= {FIT_FRACTION:g} x its largest "
                  f"(x = perf/compute/{cfg.compute}, R0 fixed at the step-0 evaluation, which stays out of the "
                  f"fitted points; the other options from the run's own scaling config: min_points "
                  f"{cfg.min_points}, bootstrap {cfg.bootstrap}), then the held-out second half predicted. "
                  f"Intervals and band: {int(round(100 * cfg.confidence))}% bootstrap over the fitted points. A "
                  f"3-parameter sigmoid needs at least max(min_points, 4) fitted points: where the first half has "
                  f"fewer the cell says so.", ""]
        def fit_table(metric: str, compute: str | None = None) -> list[str]:
            """Each counted run's fit of `metric` (recorded in the JSON document) as the table's rows."""
            rows = []
            for r in counted:
                rep, data = predictability(r.run, metric, compute=compute)
                doc["predictability"].append(rep)
                rows.append(fit_row(rep))
                if data is not None and compute is None and metric in fitted:
                    fitted[metric].append((r, data))
            return md_table(FIT_HEADER, rows) + [""]

        for metric in FIT_METRICS:
            lines += [f"### held-out {LABEL[metric]} (`{metric}`)", ""] + fit_table(metric)
        if cfg.compute != "steps":
            lines += ["### the same fits with x = RL steps", "",
                      f"The held-out readings again, with the first half of the run's RL steps fitted instead of "
                      f"the first half of its {cfg.compute}. Where completions shrink as a run learns, {cfg.compute} "
                      f"per step falls and the first half of the compute ends within a few evaluations; per step "
                      f"the evaluations split evenly. Steps are not ScaleRL's axis (compute is), so this says "
                      f"whether the curve is predictable at all, not the paper's claim as stated.", ""]
            for metric in FIT_METRICS:
                lines += [f"#### {LABEL[metric]} (`{metric}`), x = steps", ""] + fit_table(metric, compute="steps")
        lines += [f"### secondary: the training reward (`{TRAIN_REWARD}`), not a held-out reading", "",
                  "The same fit on the mean reward of each step's training rollouts (problems the policy trains "
                  "on, sampled at the rollout temperature), x = RL updates before the step's rollouts (step - 1; "
                  "the training rows log no compute counter), so R0 is step 1's reward (the initial policy's "
                  "rollouts). Offered because the held-out readings have few evaluations in the first half; it "
                  "says how predictable the training signal is, not the held-out accuracy.", ""]
        lines += fit_table(TRAIN_REWARD)

    pngs: list[Path] = []
    if plots and counted:
        p = plot_gsm8k(counted, Path(root) / "report_curves.png")
        if p is not None:
            pngs.append(p)
        fits = fitted[FIT_METRICS[0]]
        if fits:
            from rlx.scaling.plot import Curve, save_curves

            curves = [Curve(f"seed {r.run.seed}", x, y, fit) for r, (x, y, fit) in fits]
            pngs.append(save_curves(Path(root) / "report_predictability.png", curves, cfg.compute, FIT_METRICS[0],
                                    title=f"sigmoid fits on the first {FIT_FRACTION:g} of each run's compute "
                                          f"(filled: fitted, hollow: held out; band: bootstrap)"))
    if pngs:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    doc["pngs"] = [p.name for p in pngs]
    lines += ["## Runs", ""] + runs_table(jobs)
    return "\n".join(lines) + "\n", pngs, doc
