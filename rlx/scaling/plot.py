"""Plotting: data, fitted curves, extrapolation with its bootstrap band, and an A-interval panel, as PNG. The Agg
canvas of matplotlib's object API, so importing it never changes a notebook's backend."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rlx.scaling.curves import CurveFit


@dataclass
class Curve:
    """What one line of a figure shows."""

    label: str
    compute: np.ndarray  # [N] every evaluation
    reward: np.ndarray  # [N]
    fit: CurveFit | None = None


def draw_curves(ax, curves: list[Curve], unit: str, metric: str, target: float | None = None) -> None:
    """Points (filled: fitted; hollow: held out or early window), fit (solid), extrapolation (dashed), band."""
    colors = [f"C{i % 10}" for i in range(len(curves))]
    positive = [c.compute[c.compute > 0] for c in curves if (c.compute > 0).any()]
    if not positive:
        return
    c_lo = min(p.min() for p in positive)
    c_hi = max(max(p.max() for p in positive), target or 0.0)
    for curve, color in zip(curves, colors):
        pos = curve.compute > 0
        c, y = curve.compute[pos], curve.reward[pos]
        used = np.ones_like(c, dtype=bool)
        if curve.fit is not None:
            used = (c >= curve.fit.compute_min) & (c <= curve.fit.compute_max)
        ax.scatter(c[used], y[used], s=14, color=color, label=curve.label)
        ax.scatter(c[~used], y[~used], s=14, facecolors="none", edgecolors=color)
        if curve.fit is None:
            continue
        fit = curve.fit
        inside = np.geomspace(c_lo, fit.compute_max, 200)
        beyond = np.geomspace(fit.compute_max, c_hi, 100) if c_hi > fit.compute_max else None
        ax.plot(inside, fit.predict(inside), color=color, lw=1.6)
        if beyond is not None:
            ax.plot(beyond, fit.predict(beyond), color=color, lw=1.4, ls="--")
        if fit.samples is not None and len(fit.samples):
            grid = np.geomspace(c_lo, c_hi, 200)
            lo, hi = fit.band(grid)
            ax.fill_between(grid, lo, hi, color=color, alpha=0.15, lw=0)
        ax.axhline(fit.params["A"], color=color, lw=0.8, ls=":")
    if target:
        ax.axvline(target, color="0.4", lw=0.8, ls="-.")
    ax.set_xscale("log")
    ax.set_xlabel(f"compute ({unit})")
    ax.set_ylabel(metric)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="best")


def draw_asymptotes(ax, curves: list[Curve]) -> None:
    """A with its bootstrap interval per curve (horizontal error bars), B written next to it."""
    fitted = [c for c in curves if c.fit is not None]
    for i, curve in enumerate(fitted):
        fit = curve.fit
        a = fit.params["A"]
        lo, hi = fit.intervals.get("A", (a, a))
        color = f"C{curves.index(curve) % 10}"
        ax.errorbar([a], [i], xerr=[[max(a - lo, 0.0)], [max(hi - a, 0.0)]], fmt="o", color=color, capsize=3)
        ax.annotate(f"B={fit.params['B']:.2f}", (a, i), textcoords="offset points", xytext=(6, 6), fontsize=7)
    ax.set_yticks(range(len(fitted)), [c.label for c in fitted], fontsize=7)
    ax.set_xlabel("asymptote A (bootstrap interval)")
    ax.grid(True, axis="x", alpha=0.25)
    ax.invert_yaxis()


def save_curves(path: str | Path, curves: list[Curve], unit: str, metric: str, target: float | None = None,
                title: str = "", with_asymptotes: bool = False) -> Path:
    """Write the figure as PNG; returns its path."""
    fig = Figure(figsize=(11, 4.5) if with_asymptotes else (7, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    if with_asymptotes:
        ax, ax_a = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
        draw_asymptotes(ax_a, curves)
    else:
        ax = fig.subplots()
    draw_curves(ax, curves, unit, metric, target)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
