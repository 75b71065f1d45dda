"""A report of kind `runs`: one run directory per seed, no sweep file (conf/experiment/smollm2_gsm8k.yaml's), in the
sections its `report:` block chooses (docs/sweeps.md, "The report": `kind: runs`, `--base`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlx.report.predict import FIT_FRACTION, TRAIN_REWARD, fit_header, fit_row, part_name, predictability, run_scaling
from rlx.report.problems import LABEL, READINGS, Problems, RunResult, analyse_run, read_problems, resolve_base
from rlx.report.tables import md_table, runs_table, t_interval
from rlx.run.records import Run


def guess_section(counted: list[RunResult], doc: dict) -> list[str]:
    """What answering the most common gold everywhere scores, and each file's most common answer (rlx.eval.guess)."""
    from rlx.eval.guess import best_constant, spreads_of_rows

    files = [(r, side, f) for r in counted for side, f in (("start", r.start_file), ("end", r.end_file))
             if f is not None and f.rows and all("gold" in row for row in f.rows)]
    if not files:
        return []
    by_set: dict[str, list[dict]] = {}
    for row in files[0][2].rows:
        by_set.setdefault(str(row.get("set", "default")), []).append(row)
    shares = {}  # set -> (the most common gold, problems it is the gold of, problems)
    for name, rows in by_set.items():
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


def title(template: str, jobs: list[Run]) -> str:
    """The title with {task}, {env} and {start} (SFT warm start or the pretrained model) from the runs' configs."""
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
    return template.format(task=" / ".join(tasks), env=f", env={', '.join(envs)}" if envs else "", start=start)


@dataclass
class RunsContext:
    root: Path
    jobs: list[Run]
    counted: list[RunResult]  # runs with a step-0 evaluation and one after it, by seed
    base_file: Problems | None
    doc: dict
    fitted: list = field(default_factory=list)  # (run result, (x, y, fit)) of the first fitted reading
    fit_metric: str | None = None
    fraction: float = FIT_FRACTION


def header(ctx: RunsContext, spec_title: str, results: list[RunResult]) -> list[str]:
    counted = ctx.counted
    seeds = [r.run.seed for r in counted]
    lines = [f"# {title(spec_title, ctx.jobs)}: `{ctx.root}`", "",
             f"{len(ctx.jobs)} run directories; {len(counted)} counted (a step-0 evaluation and at least one after "
             f"it), seeds {', '.join(map(str, seeds)) or '–'}; {sum(r.run.ok for r in counted)} of them finished."]
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
                  f"are `{ctx.base_file.path}`. The step-0 evaluation is deterministic greedy decoding of the same SFT "
                  f"base in every seed, and this file scores exactly the step-0 val/* each of these runs logged "
                  f"(checked; a file that does not is refused)."]
    return lines + [""]


def readings_section(ctx: RunsContext) -> list[str]:
    """Per seed: start and end accuracy in each reading, and the paired per-problem difference."""
    lines = ["## Held-out accuracy per seed: start (step 0) and end (last evaluation)", "",
             "Greedy accuracy on the held-out problems in three readings of the same completions: the task's "
             "(`val/acc`, the stated-number rule the rewards pay), lm-eval's GSM8K strict-match and "
             "flexible-extract; % (k/n). end - start is the paired per-problem difference in points with its 95% "
             "interval (rlx.eval.paired: d_i = passed_end(i) - passed_start(i), mean +- 1.96 sd / sqrt(n)); "
             "gained / lost: problems passed only at the end / only at the start.", ""]
    rows = []
    for r in ctx.counted:
        for key, _, label in READINGS:
            c = r.readings[key]
            gain, gl = paired_text(c)
            rows.append([str(r.run.seed), label, pct_count(c["start"], c["start_k"], c["start_n"]),
                         f"step {r.end}: " + pct_count(c["end"], c["end_k"], c["end_n"]), gain, gl,
                         r.start_source])
    lines += md_table(["seed", "reading", "start (%)", "end (%)", "end - start (points) [paired 95%]",
                       "gained / lost", "start's per-problem file"], rows) + [""]
    notes = [f"- `{r.run.name}`: {n}" for r in ctx.counted for n in r.notes]
    if notes:
        lines += ["Per-problem files that disagree with metrics.jsonl:", ""] + notes + [""]
    return lines


def over_seeds_section(ctx: RunsContext) -> list[str]:
    """Mean start and end over the counted seeds, and the per-seed gains' t-interval."""
    lines = ["## Over seeds", "",
             "Mean start and end accuracy over the counted seeds, and the per-seed gains (end - start, points) "
             "with their 95% Student-t interval (n - 1 degrees of freedom).", ""]
    rows = []
    for key, _, label in READINGS:
        pairs = [(r.readings[key]["start"], r.readings[key]["end"]) for r in ctx.counted]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        gains = [100 * (b - a) for a, b in pairs]
        mean, lo, hi = t_interval(gains)
        summary = {"n": len(pairs), "start_mean": float(np.mean([a for a, _ in pairs])) if pairs else None,
                   "end_mean": float(np.mean([b for _, b in pairs])) if pairs else None, "gains": gains,
                   "gain_mean": mean, "gain_lo": lo, "gain_hi": hi}
        ctx.doc["over_seeds"][key] = summary
        gain_cell = ("–" if mean is None else f"{mean:+.1f}" + (
            f" [{lo:+.1f}, {hi:+.1f}]" if lo is not None else " (one seed: no interval)"))
        rows.append([label, str(len(pairs)), "–" if not pairs else f"{100 * summary['start_mean']:.1f}",
                     "–" if not pairs else f"{100 * summary['end_mean']:.1f}", gain_cell,
                     ", ".join(f"{g:+.1f}" for g in gains) or "–"])
    return lines + md_table(["reading", "seeds", "start, mean (%)", "end, mean (%)", "end - start (points) [95% t]",
                             "per-seed gains"], rows) + [""]


def _fit_table(ctx: RunsContext, metric: str, compute: str | None = None) -> list[str]:
    """Each counted run's fit of `metric` (recorded in the JSON document) as the table's rows."""
    rows = []
    for r in ctx.counted:
        rep, data = predictability(r.run, metric, compute=compute, fraction=ctx.fraction)
        ctx.doc["predictability"].append(rep)
        rows.append(fit_row(rep))
        if data is not None and compute is None and metric == ctx.fit_metric:
            ctx.fitted.append((r, data))
    return md_table(fit_header(ctx.fraction), rows) + [""]


def predictability_section(ctx: RunsContext, metrics: tuple = ("val/flexible-extract", "val/acc"),
                           fraction: float = FIT_FRACTION, steps_too: bool = True,
                           train_reward: bool = True) -> list[str]:
    """ScaleRL's predictability: each reading in `metrics` (and the training reward) fitted on part of each run."""
    if not ctx.counted:
        return []
    ctx.fraction, ctx.fit_metric = float(fraction), metrics[0]
    cfg = run_scaling(ctx.counted[0].run, ctx.fraction)
    part = part_name(ctx.fraction)
    lines = ["## Predictability (ScaleRL)", "",
             f"ScaleRL's check that a run's curve is predictable: the sigmoid R(C) = R0 + (A - R0) / (1 + "
             f"(C_mid / C)^B) fitted by rlx.scaling (as `python -m rlx.scaling fit RUN --fit-fraction "
             f"{ctx.fraction:g}`) on each run's evaluations with compute <= {ctx.fraction:g} x its largest "
             f"(x = perf/compute/{cfg.compute}, R0 fixed at the step-0 evaluation, which stays out of the "
             f"fitted points; the other options from the run's own scaling config: min_points "
             f"{cfg.min_points}, bootstrap {cfg.bootstrap}), then the held-out {'second half' if ctx.fraction == 0.5 else 'rest'} predicted. "
             f"Intervals and band: {int(round(100 * cfg.confidence))}% bootstrap over the fitted points. A "
             f"3-parameter sigmoid needs at least max(min_points, 4) fitted points: where the {part} has "
             f"fewer the cell says so.", ""]
    for metric in metrics:
        lines += [f"### held-out {LABEL.get(metric, metric)} (`{metric}`)", ""] + _fit_table(ctx, metric)
    if steps_too and cfg.compute != "steps":
        lines += ["### the same fits with x = RL steps", "",
                  f"The held-out readings again, with the {part} of the run's RL steps fitted instead of "
                  f"the {part} of its {cfg.compute}. Where completions shrink as a run learns, {cfg.compute} "
                  f"per step falls and the {part} of the compute ends within a few evaluations; per step "
                  f"the evaluations split evenly. Steps are not ScaleRL's axis (compute is), so this says "
                  f"whether the curve is predictable at all, not the paper's claim as stated.", ""]
        for metric in metrics:
            lines += [f"#### {LABEL.get(metric, metric)} (`{metric}`), x = steps", ""] + _fit_table(
                ctx, metric, compute="steps")
    if train_reward:
        lines += [f"### secondary: the training reward (`{TRAIN_REWARD}`), not a held-out reading", "",
                  "The same fit on the mean reward of each step's training rollouts (problems the policy trains "
                  "on, sampled at the rollout temperature), x = RL updates before the step's rollouts (step - 1; "
                  "the training rows log no compute counter), so R0 is step 1's reward (the initial policy's "
                  f"rollouts). Offered because the held-out readings have few evaluations in the {part}; it "
                  "says how predictable the training signal is, not the held-out accuracy.", ""]
        lines += _fit_table(ctx, TRAIN_REWARD)
    return lines


RUN_SECTIONS = {"readings": readings_section, "over_seeds": over_seeds_section,
                "guess": lambda ctx: guess_section(ctx.counted, ctx.doc), "predictability": predictability_section}


def runs_report(root: Path, jobs: list[Run], spec, plots: bool = True, base: str | Path | None = None
                ) -> tuple[str, list[Path], dict]:
    """(markdown, PNG paths, the JSON document) for the runs under root, one per seed; writes only the PNGs."""
    base_file = read_problems(resolve_base(base)) if base is not None else None
    for j in jobs:
        j.arm = spec.name
    jobs = sorted(jobs, key=lambda j: (j.seed is None, j.seed if isinstance(j.seed, int) else 0, j.name))
    results = [analyse_run(j, base_file) for j in jobs]
    doc: dict = {"layout": spec.name, "root": str(root), "base": None if base_file is None else str(base_file.path),
                 "runs": [run_doc(r) for r in results if r.counted], "over_seeds": {}, "predictability": [],
                 "pngs": []}
    ctx = RunsContext(Path(root), jobs, [r for r in results if r.counted], base_file, doc)
    lines = header(ctx, spec.title, results)
    for name, opts in spec.sections:
        lines += RUN_SECTIONS[name](ctx, **opts)
    pngs: list[Path] = []
    if plots and ctx.counted:
        pngs += [p for p in [plot_gsm8k(ctx.counted, ctx.root / "report_curves.png")] if p is not None]
        if ctx.fitted:
            from rlx.scaling.plot import Curve, save_curves

            curves = [Curve(f"seed {r.run.seed}", x, y, fit) for r, (x, y, fit) in ctx.fitted]
            cfg = run_scaling(ctx.counted[0].run, ctx.fraction)
            pngs.append(save_curves(ctx.root / "report_predictability.png", curves, cfg.compute, ctx.fit_metric,
                                    title=f"sigmoid fits on the first {ctx.fraction:g} of each run's compute "
                                          f"(filled: fitted, hollow: held out; band: bootstrap)"))
    if pngs:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    doc["pngs"] = [p.name for p in pngs]
    lines += ["## Runs", ""] + runs_table(jobs)
    return "\n".join(lines) + "\n", pngs, doc


def run_doc(r: RunResult) -> dict:
    return {"name": r.run.name, "seed": r.run.seed, "status": r.run.status, "steps": r.steps,
            "start_step": r.start, "end_step": r.end, "start_source": r.start_source,
            "start_file": None if r.start_file is None else str(r.start_file.path),
            "end_file": None if r.end_file is None else str(r.end_file.path),
            "readings": r.readings, "notes": r.notes}
