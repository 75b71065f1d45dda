"""Run grouping: a run's evaluations against compute, seeds pooled, runs grouped into recipes; and `fit_run`,
the training loop's end-of-run fit of one run (writes scaling_fit.{json,png} into it)."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlx.run.records import Run, read_run
from rlx.scaling.config import COMPUTE_UNITS, as_config
from rlx.scaling.curves import CurveFit
from rlx.scaling.fitting import fit_points, target_compute

FIT_JSON, FIT_PNG = "scaling_fit.json", "scaling_fit.png"


@dataclass
class Series:
    """One run's evaluations of a metric: step [N], compute [N], reward [N], sorted by step."""

    step: np.ndarray
    compute: np.ndarray
    reward: np.ndarray

    def __len__(self) -> int:
        return int(self.step.size)

    @property
    def r0(self) -> float | None:
        """The reward of the step-0 evaluation (before any RL), None if the run has none."""
        return float(self.reward[0]) if self.step.size and self.step[0] == 0 else None


def evaluations(run: Run, metric: str, unit: str) -> Series:
    """The run's evaluations of `metric` with their cumulative compute; duplicate steps (a resumed run) keep the last."""
    if unit not in COMPUTE_UNITS:
        raise ValueError(f"unknown compute unit {unit!r}; choose one of {', '.join(COMPUTE_UNITS)}")
    key = f"perf/compute/{unit}"
    by_step = {int(r["step"]): r for r in run.records if metric in r}
    if not by_step:
        raise ValueError(f"{run.path}: no evaluation logs {metric!r} in metrics.jsonl")
    steps = sorted(by_step)
    compute = []
    for s in steps:
        rec = by_step[s]
        if key in rec:
            compute.append(rec[key])
        elif unit == "steps":
            compute.append(s)
        else:
            logged = sorted(k for k in rec if k.startswith("perf/compute/")) or ["none"]
            raise ValueError(f"{run.path}: the evaluation at step {s} has no {key!r} (logged: {', '.join(logged)})")
    return Series(step=np.array(steps, dtype=int), compute=np.array(compute, dtype=float),
                  reward=np.array([_number(by_step[s][metric]) for s in steps], dtype=float))


def _number(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def pool(series: list[Series]) -> tuple[np.ndarray, np.ndarray, float | None]:
    """(compute [N], reward [N], R0): every run's evaluations after step 0, R0 their mean step-0 reward or None."""
    r0s = [s.r0 for s in series if s.r0 is not None]
    keep = [s.step > 0 if s.r0 is not None else np.ones(len(s), bool) for s in series]
    compute = np.concatenate([s.compute[k] for s, k in zip(series, keep)]) if series else np.zeros(0)
    reward = np.concatenate([s.reward[k] for s, k in zip(series, keep)]) if series else np.zeros(0)
    return compute, reward, (float(np.mean(r0s)) if r0s else None)


# Config keys that do not define a recipe: any key with a `seed` part (run seed, data seed), and
# analysis/bookkeeping settings (prefixes).
NOT_RECIPE_PREFIXES = ("logger.", "scaling.", "paper", "report", "hydra.", "model.cache_dir", "train.progress",
                       "trainer.threads", "trainer.device", "train.resume", "train.log_every", "train.ckpt_every",
                       "train.callbacks")


def is_recipe_key(key: str) -> bool:
    parts = key.split(".")
    if any(p == "seed" or p.endswith("_seed") or p.startswith("seed_") for p in parts):
        return False
    return not any(key == p.rstrip(".") or key.startswith(p) for p in NOT_RECIPE_PREFIXES)


def recipe_of(run: Run) -> tuple:
    """Hashable recipe identity: the run's config without seeds and bookkeeping (its path if it has none)."""
    if not run.flat:
        return (("<dir>", str(run.path)),)
    return tuple(sorted((k, repr(v)) for k, v in run.flat.items() if is_recipe_key(k)))


def group_by_recipe(runs: list[Run], root: Path) -> dict[str, list[Run]]:
    """{label: runs}, in first-seen order; labels name only what differs between recipes."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(recipe_of(run), []).append(run)
    labels = recipe_labels(list(groups), [g[0] for g in groups.values()], root)
    return {label: groups[key] for key, label in zip(groups, labels)}


def recipe_labels(keys: list[tuple], examples: list[Run], root: Path) -> list[str]:
    """Short unique labels: `k=v` for the config keys that differ; a group whose `name` differs shows only that."""
    dicts = [dict(k) for k in keys]
    all_keys = sorted(set().union(*dicts)) if dicts else []
    differing = [k for k in all_keys if len({d.get(k, "<unset>") for d in dicts}) > 1]
    named = {k.rsplit(".", 1)[0] for k in differing if k.endswith(".name") and "." in k}
    short = [k for k in differing if k.endswith(".name") or not any(k.startswith(g + ".") for g in named)]
    labels = []
    for d, run in zip(dicts, examples):
        if "<dir>" in d:
            labels.append(_relative(run.path, root))
        elif not differing:
            name = run.flat.get("algo.name")
            labels.append(str(name) if name is not None else _relative(run.path, root))
        else:
            labels.append(", ".join(f"{_short_key(k)}={_plain(d.get(k, 'unset'))}" for k in short))
    if len(set(labels)) < len(labels):  # collapsing by group name hid a difference: show everything
        labels = [", ".join(f"{_short_key(k)}={_plain(d.get(k, 'unset'))}" for k in differing)
                  if "<dir>" not in d else lab for d, lab in zip(dicts, labels)]
    return labels


def run_label(run: Run, recipe: str, root: Path) -> str:
    """A run's label inside its recipe: the recipe plus its seed (or its directory)."""
    seed = run.config.get("seed")
    return f"{recipe} (seed={seed})" if seed is not None else f"{recipe} [{_relative(run.path, root)}]"


def by_run(groups: dict[str, list[Run]], root: Path) -> dict[str, list[Run]]:
    """One group per run, labelled by `run_label`; runs that share a label (one recipe and seed run twice under
    root) also name their directory, so none is dropped."""
    pairs = [(run_label(r, label, root), r) for label, members in groups.items() for r in members]
    shared = {label for label, _ in pairs if sum(other == label for other, _ in pairs) > 1}
    return {(f"{label} [{_relative(r.path, root)}]" if label in shared else label): [r] for label, r in pairs}


def _short_key(key: str) -> str:
    return key[: -len(".name")] if key.endswith(".name") else key


def _plain(v: str) -> str:
    return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"" else v


def _relative(path: Path, root: Path) -> str:
    try:
        rel = str(path.relative_to(root))
    except ValueError:
        rel = str(path)
    return rel if rel != "." else path.name


def fit_report(fit: CurveFit, compute: np.ndarray, reward: np.ndarray, target: float,
               prefix: str = "scaling/") -> dict[str, float]:
    """The fit's flat float dict plus the prediction at the target compute and the error on held-out points."""
    out = fit.to_dict(prefix)
    out[f"{prefix}target_compute"] = float(target)
    out[f"{prefix}pred_at_target"] = float(fit.predict(target))
    if fit.samples is not None and len(fit.samples):
        lo, hi = fit.band(np.array([target]))
        out[f"{prefix}pred_at_target_lo"], out[f"{prefix}pred_at_target_hi"] = float(lo[0]), float(hi[0])
    held = compute > fit.compute_max
    if held.any():
        out[f"{prefix}heldout_mae"] = float(np.mean(np.abs(fit.predict(compute[held]) - reward[held])))
        out[f"{prefix}heldout_points"] = float(held.sum())
    return out


def fit_run(run_dir: str | Path, cfg) -> dict[str, float]:
    """Fit the run's `cfg.metric` against `perf/compute/<cfg.compute>`, write scaling_fit.{json,png} into it and
    return fit_report's floats; a ValueError when there is nothing to fit."""
    cfg = as_config(cfg)
    if cfg.fit == "none":
        raise ValueError("scaling.fit is 'none': nothing to fit")
    from rlx.scaling.plot import Curve, save_curves

    run_dir = Path(run_dir)
    series = evaluations(read_run(run_dir), cfg.metric, cfg.compute)
    compute, reward, r0 = pool([series])
    fit = fit_points(compute, reward, cfg, r0=r0)
    target = target_compute(cfg, series.compute.max())
    report = fit_report(fit, compute, reward, target)
    doc = {"kind": fit.kind, "metric": cfg.metric, "compute": cfg.compute, "params": fit.params,
           "intervals": {k: list(v) for k, v in fit.intervals.items()}, "confidence": fit.confidence, "report": report,
           "points": {"step": series.step.tolist(), "compute": series.compute.tolist(), "reward": series.reward.tolist()},
           "config": dataclasses.asdict(cfg)}
    (run_dir / FIT_JSON).write_text(json.dumps(doc, indent=2, allow_nan=True))
    params = ", ".join(f"{k}={v:.4g}" for k, v in fit.params.items())
    save_curves(run_dir / FIT_PNG, [Curve(run_dir.name, compute, reward, fit)], cfg.compute, cfg.metric,
                target, title=f"{fit.kind} fit of {cfg.metric} vs {cfg.compute}: {params}")
    return report
