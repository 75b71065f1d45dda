"""The commands and the run-end hook on fake run directories: tables, PNGs, JSON, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from rlx.scaling.__main__ import compare_main
from rlx.scaling import ScalingConfig, fit_run
from rlx.scaling.__main__ import fit_main

REPO = Path(__file__).resolve().parents[2]


def _png_ok(path: Path) -> bool:
    img = imread(path)  # [H, W, 4] when it is a real PNG
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and img.ndim == 3 and img.shape[0] > 100 and img.std() > 0


def _python(*args: str) -> subprocess.CompletedProcess:
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


@pytest.mark.integration
def test_compare_command_writes_table_png_and_json(sweep):
    proc = _python("-m", "rlx.scaling", "compare", str(sweep), "--bootstrap", "30")
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("| algo=")]
    assert len(table) == 2  # one row per recipe, seeds pooled
    assert table[0].startswith("| algo=cispo | 2 | 200 | 2e+14 |")  # sorted by A, best first
    assert "higher asymptote: **algo=cispo**" in proc.stdout
    assert (sweep / "compare.md").read_text() in proc.stdout
    assert _png_ok(sweep / "compare.png")
    rows = json.loads((sweep / "compare.json").read_text())["rows"]
    assert {r["label"]: round(r["fit"]["params"]["A"], 2) for r in rows} == pytest.approx({"algo=cispo": 0.70, "algo=grpo": 0.61}, abs=0.015)


def test_compare_by_run_marks_failed_runs_and_short_runs(sweep, make_run, capsys):
    (sweep / "1" / "summary.json").write_text(json.dumps({"status": "failed"}))
    steps = np.array([0, 5, 10])
    make_run(sweep / "4", steps, steps * 1e12, [0.2, 0.25, 0.3], algo="dapo")  # too short to fit
    assert compare_main([str(sweep), "--by", "run", "--bootstrap", "0", "--prefix", "runs"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| algo=")]
    assert len(rows) == 5
    assert any("(seed=1)" in r and "| 1 (1 failed) |" in r for r in rows)
    assert any(r.startswith("| algo=dapo (seed=0)") and "no fit: too few points" in r for r in rows)
    assert _png_ok(sweep / "runs.png") and (sweep / "runs.md").is_file()


def test_compare_by_run_keeps_two_runs_of_one_recipe_and_seed(sweep, make_run, capsys):
    """A rerun of a recipe and seed somewhere else under the root is a row of its own, named by its directory."""
    steps = np.arange(0, 201, 10)
    make_run(sweep / "again" / "0", steps, steps * 1e12, 0.7 - 0.5 / (1 + steps / 50), algo="cispo", loss="cispo")
    assert compare_main([str(sweep), "--by", "run", "--bootstrap", "0", "--prefix", "runs"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| algo=cispo (seed=0)")]
    assert len(rows) == 2 and any("[again/0]" in r for r in rows), rows


@pytest.mark.integration
def test_fit_command_prints_intervals_and_prediction(sweep):
    proc = _python("-m", "rlx.scaling", "fit", str(sweep / "0"), "--target", "4e14", "--fit-fraction", "0.5", "--bootstrap", "30")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in ("A", "B", "C_mid"):
        assert f"  {name:<6}= " in out and "95% CI [" in out
    assert "predicted val/acc at flops=4e+14:" in out and "95% band [" in out
    assert "held-out points: 20" in out
    assert _png_ok(sweep / "0" / "scaling_fit.png")


def test_fit_command_on_several_runs_and_a_bad_dir(sweep, tmp_path, capsys):
    out_png = tmp_path / "fits.png"
    assert fit_main([str(sweep / "0"), str(sweep / "2"), "--bootstrap", "0", "--out", str(out_png), "--fit", "power"]) == 0
    text = capsys.readouterr().out
    assert text.count("power fit on 40 points") == 2 and "  D     = " in text
    assert _png_ok(out_png) and set(json.loads(out_png.with_suffix(".json").read_text())["reports"]) == {
        str(sweep / "0"), str(sweep / "2")}
    with pytest.raises(SystemExit):
        fit_main([str(tmp_path / "missing")])


def test_fit_run_returns_scalars_and_writes_png_and_json(sweep):
    cfg = ScalingConfig(fit="sigmoid", compute="flops", bootstrap=40)
    out = fit_run(sweep / "0", cfg)
    assert {"scaling/A", "scaling/B", "scaling/C_mid", "scaling/R0", "scaling/A_lo", "scaling/A_hi",
            "scaling/sse", "scaling/pred_at_target"} <= set(out)
    assert all(isinstance(v, float) for v in out.values())
    assert out["scaling/A"] == pytest.approx(0.61, abs=0.02)
    assert out["scaling/R0"] == pytest.approx(0.2)
    assert out["scaling/target_compute"] == pytest.approx(8e14)  # 4x the largest observed compute
    assert _png_ok(sweep / "0" / "scaling_fit.png")
    saved = json.loads((sweep / "0" / "scaling_fit.json").read_text())
    assert saved["params"]["A"] == out["scaling/A"] and saved["kind"] == "sigmoid"
    power = fit_run(sweep / "0", {"fit": "power", "bootstrap": 0})  # a dict / OmegaConf node works too
    assert "scaling/D" in power and "scaling/C_mid" not in power


def test_step0_evaluation_anchors_R0_even_when_it_carries_setup_compute(tmp_path, make_run, noisy):
    """gpu_hours at step 0 can count setup wall time: R0 still comes from step 0, which is not a fitted point."""
    steps = np.arange(0, 201, 5)
    compute = steps * 1e12
    run = make_run(tmp_path / "r", steps, compute, noisy(compute, 0.61, 1.9, 6e13, r0=0.25, seed=1), gpu_hours_setup=0.003)
    out = fit_run(run, ScalingConfig(fit="sigmoid", compute="gpu_hours", bootstrap=0))
    assert out["scaling/R0"] == 0.25
    assert out["scaling/n_points"] == 40 and out["scaling/fit_compute_min"] == pytest.approx(0.003 + 5.0)
    assert out["scaling/A"] == pytest.approx(0.61, abs=0.02)
    assert out["scaling/C_mid"] == pytest.approx(0.003 + 60.0, rel=0.1)  # gpu-hours: 1e-12 per flop


def test_fit_run_errors_are_value_errors(sweep, make_run, tmp_path):
    with pytest.raises(ValueError, match="scaling.fit is 'none'"):
        fit_run(sweep / "0", ScalingConfig())
    with pytest.raises(ValueError, match="unknown scaling.fit"):
        fit_run(sweep / "0", ScalingConfig(fit="logistic"))
    with pytest.raises(ValueError, match="unknown scaling option"):
        fit_run(sweep / "0", {"fit": "sigmoid", "unit": "flops"})
    short = make_run(tmp_path / "short", [0, 5, 10], [0, 5e12, 1e13], [0.2, 0.3, 0.35])
    with pytest.raises(ValueError, match="too few points"):
        fit_run(short, ScalingConfig(fit="sigmoid"))
    nan = make_run(tmp_path / "nan", np.arange(0, 50, 5), np.arange(0, 50, 5) * 1e12, [0.2] + [float("nan")] * 9)
    with pytest.raises(ValueError, match="NaN"):
        fit_run(nan, ScalingConfig(fit="sigmoid"))


@pytest.mark.integration
def test_scaling_never_imports_torch():
    code = "import sys, rlx.scaling.config, rlx.scaling.__main__; from rlx.scaling import *; print('torch' in sys.modules)"
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
