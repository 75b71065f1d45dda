"""The `predictions` and `seed_fits` sections (rlx.report.fits) on hand-made sweeps whose runs follow known sigmoids:
a fit on the first half predicts the rest inside its band, A is recovered per seed, and an arm whose A is higher
in every seed is found higher, paired by seed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from rlx.report.build import build

R0, C_MID, B = 0.05, 30.0, 2.0
A = {"low": 0.40, "high": 0.60}  # per arm; each seed moves A by SEED_SHIFT[seed]
SEED_SHIFT = {0: -0.01, 1: 0.0, 2: 0.015}  # A stays on the fitter's 0.005 grid
NOISE = 0.002  # alternating +-, so the fits have a residual


def reward(arm: str, seed: int, step: int) -> float:
    if step == 0:
        return R0
    a = A[arm] + SEED_SHIFT[seed]
    return R0 + (a - R0) / (1 + (C_MID / step) ** B) + NOISE * (-1) ** step


def make_job(root: Path, arm: str, seed: int) -> None:
    job = root / f"{arm}_seed{seed}"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra/config.yaml").write_text(yaml.safe_dump({
        "seed": seed, "algo": {"name": arm}, "logger": {"group": None},
        "scaling": {"fit": "sigmoid", "metric": "val/mean_at_k", "compute": "steps", "bootstrap": 50,
                    "min_points": 4}}))
    (job / ".hydra/overrides.yaml").write_text(yaml.safe_dump([f"seed={seed}"]))
    (job / "summary.json").write_text(json.dumps({"status": "finished", "wall_s": 1.0}))
    rows = [{"step": s, "val/mean_at_k": reward(arm, seed, s), "val/acc": reward(arm, seed, s)}
            for s in range(0, 121, 4)]
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def sweep(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "sweep"
    for arm in A:
        for seed in SEED_SHIFT:
            make_job(root, arm, seed)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"report": {"title": "fits", "arm": {"infer": "algo"}, "order": ["low", "high"],
                                               "sections": ["seed_fits", {"predictions": {"fractions": [0.5]}}]}}))
    return root, spec


def _rows(md: str, head: str) -> list[list[str]]:
    """The rows of the first markdown table after `head`."""
    lines = md.split(head, 1)[1].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[start + 2:end]]


def test_seed_fits_recover_each_arms_asymptote_and_rank_them(tmp_path):
    root, spec = sweep(tmp_path)
    md, _, _ = build(root, spec_file=spec, plots=False)
    table = {r[0]: r for r in _rows(md, "## A, B and C_mid over seeds")}
    for arm, a in A.items():
        assert table[arm][1] == "3/3"
        mean = float(table[arm][2].split()[0])
        assert abs(mean - (a + sum(SEED_SHIFT.values()) / 3)) < 0.02, (arm, table[arm])
    against = {(r[0], r[1]): r for r in _rows(md, "paired by seed")}
    a_diff = against[("low - high", "A")]
    assert float(a_diff[2].split()[0]) < -0.15 and a_diff[3].startswith("does not hold")


def test_a_fit_on_half_the_compute_predicts_the_rest(tmp_path, monkeypatch):
    root, spec = sweep(tmp_path)
    md, _, _ = build(root, spec_file=spec, plots=False)
    rows = _rows(md, "### fitted on the first half")
    assert len(rows) == 6
    for r in rows:
        measured, error = float(r[8]), float(r[9].split()[0])
        assert abs(error) < 0.03 * measured, r  # the last point, 120 steps, from the first 60
        k, n = map(int, r[-1].split("/"))
        # held-out steps 64..120. The band is the fitted curve's (a bootstrap over the fitted points), not a
        # prediction interval: the +-0.002 noise of the measured points is wider than it, so most fall outside
        assert n == 15 and k < n, r
    monkeypatch.setattr(sys.modules[__name__], "NOISE", 0.0)
    clean = tmp_path / "clean"
    clean.mkdir()
    root, spec = sweep(clean)
    md, _, _ = build(root, spec_file=spec, plots=False)
    for r in _rows(md, "### fitted on the first half"):
        assert r[-1] == "15/15", r  # on the curve itself every held-out point is inside
