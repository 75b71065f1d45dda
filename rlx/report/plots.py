"""The report's figures: training curves per arm (mean over seeds, min-max band) and ScaleRL's fitted sigmoids."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlx.run.records import Run

CURVE_PANELS = [("train/reward/mean", "train reward (mean)"), ("actor/entropy", "policy entropy (rollouts)")]
EVAL_TITLES = {"val/acc": "held-out accuracy (greedy)", "val/mean_at_k": "held-out pass rate (mean@k)"}


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or y.size < window:
        return y
    kernel = np.ones(window) / window
    pad = np.pad(y, (window // 2, window - 1 - window // 2), mode="edge")
    return np.convolve(pad, kernel, mode="valid")


def label_panels(axes, panels) -> None:
    """Titles, the step axis and a grid on each (key, title) panel; the legend on the first panel with lines."""
    for ax, (_, title) in zip(axes, panels):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("RL step")
        ax.grid(True, alpha=0.25)
    next((ax for ax in axes if ax.lines), axes[0]).legend(fontsize=7, loc="best")


def plot_curves(arms: dict[str, list[Run]], path: Path, labels: dict[str, str],
                eval_key: str = "val/acc") -> Path | None:
    """Per arm: the mean over seeds of train reward, entropy and `eval_key` against the RL step (band: min-max)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = CURVE_PANELS + [(eval_key, EVAL_TITLES.get(eval_key, eval_key))]
    fig = Figure(figsize=(15, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels))
    drawn = False
    for i, (arm, js) in enumerate(arms.items()):
        color = f"C{i % 10}"
        for ax, (key, title) in zip(axes, panels):
            runs = [j.series(key) for j in js if j.records]
            runs = [(s, v) for s, v in runs if s.size]
            if key != eval_key:
                runs = [(s[s >= 1], v[s >= 1]) for s, v in runs]
                runs = [(s, v) for s, v in runs if s.size]
            if not runs:
                continue
            steps = np.array(sorted(set().union(*[set(s.tolist()) for s, _ in runs])))
            grid = np.full((len(runs), steps.size), np.nan)
            for r, (s, v) in enumerate(runs):
                grid[r, np.searchsorted(steps, s)] = v
            with np.errstate(all="ignore"):
                mean, lo, hi = np.nanmean(grid, 0), np.nanmin(grid, 0), np.nanmax(grid, 0)
            window = max(1, steps.size // 20) if key != eval_key else 1
            ax.plot(steps, _smooth(mean, window), color=color, lw=1.5, label=labels.get(arm, arm),
                    marker="o" if key == eval_key else None, ms=3)
            if len(runs) > 1:
                ax.fill_between(steps, lo, hi, color=color, alpha=0.12, lw=0)
            drawn = True
    if not drawn:
        return None
    label_panels(axes, panels)
    fig.suptitle("mean over seeds (band: min-max); train panels smoothed over ~5% of the steps", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def plot_scaling(arms: dict[str, list[Run]], path: Path, labels: dict[str, str], cfg) -> Path | None:
    from rlx.report.scalerl import fit_arms
    from rlx.scaling.fitting import target_compute
    from rlx.scaling.plot import Curve, save_curves

    fits = fit_arms(arms, cfg)
    curves = [Curve(labels.get(a, a), f.compute, f.reward, f.fit) for a, f in fits.items() if f.compute.size]
    if not curves:
        return None
    target = target_compute(cfg, max(float(c.compute.max()) for c in curves))
    return save_curves(path, curves, cfg.compute, cfg.metric, target,
                       title=f"{cfg.metric} vs compute ({cfg.compute}), sigmoid fits per arm", with_asymptotes=True)
