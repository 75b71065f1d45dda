"""ScaleRL's predictability check on one run: the sigmoid fitted on the first part of its compute, the rest
predicted and compared with what was measured, with the fit's bootstrap band."""

from __future__ import annotations

import dataclasses

import numpy as np

from rlx.run.records import Run
from rlx.scaling.fitting import fit_points
from rlx.scaling.grouping import evaluations, pool
from rlx.sweeps.points import scaling_config

TRAIN_REWARD = "train/reward/mean"
FIT_FRACTION = 0.5  # ScaleRL: fit the first half of the compute, predict the second


def run_scaling(run: Run, fraction: float = FIT_FRACTION):
    """The run's own scaling config (fit defaulting to sigmoid) with the fit fraction (ScaleRL's: a half)."""
    return dataclasses.replace(scaling_config([run]), fit="sigmoid", fit_fraction=fraction)


def predictability(run: Run, metric: str, compute: str | None = None, fraction: float = FIT_FRACTION
                   ) -> tuple[dict, tuple | None]:
    """(the JSON row, (x, y, fit) or None): the sigmoid fitted on the first `fraction` of the run's compute, the rest
    predicted; the row says why there is no fit. The training reward's x is step - 1 (R0: step 1's reward)."""
    cfg = run_scaling(run, fraction)
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
                f"the {part_name(fraction)} ({out['x']} <= {cut:.3g}) holds {int(first.sum())} evaluation(s) after the start "
                f"(the start fixes R0), a 3-parameter sigmoid needs at least {need} (scaling.min_points "
                f"{cfg.min_points}): more evaluations in the {part_name(fraction)}, or a longer run")
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
    head = [str(r["seed"]), step_list(r["fit_steps"])]
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


def part_name(fraction: float) -> str:
    return {0.5: "first half", 1 / 3: "first third"}.get(fraction, f"first {fraction:g}")


def fit_header(fraction: float = FIT_FRACTION) -> list[str]:
    return [h.replace("first half", part_name(fraction)) for h in FIT_HEADER]


FIT_HEADER = ["seed", "fitted steps (first half)", "A [95%]", "B [95%]", "C_mid [95%]", "R0",
              "predicted at the last point [95% band]", "measured", "predicted - measured", "inside the band"]
