"""The rlx-vs-TRL step benchmark runs end to end at a tiny setting (timings are printed, never compared)."""

import json
import math

import pytest

from rlx.bench.vs_trl import main


def test_vs_trl_runs_tiny(tmp_path, capsys):
    pytest.importorskip("trl")
    out = tmp_path / "vs_trl.json"
    result = main(["--sizes", "1m", "--max-new", "8", "--steps", "2", "--repeats", "1", "--threads", "1",
                   "--out", str(out), "--work-dir", str(tmp_path / "work")])
    printed = capsys.readouterr().out
    (row,) = result["rows"]
    assert (row["size"], row["max_new"]) == ("1m", 8)
    assert 0.9e6 < row["params"] < 1.1e6
    for side in ("rlx", "trl"):
        (run,) = result["raw"][0]["runs"][side]
        assert [s["step"] for s in run["steps"]] == [1, 2]  # both sides produced per-step times
        for s in run["steps"]:
            assert s["step_s"] > 0 and s["gen_s"] > 0 and s["train_s"] > 0
            assert s["gen_s"] + s["train_s"] <= s["step_s"] * 1.001
            assert 0 < s["mean_len"] <= 8
    for phase in ("step", "gen", "train"):
        for key in (phase, f"{phase}_cpu"):  # wall and process-CPU seconds
            assert math.isfinite(row[f"ratio_{key}"]) and row[f"ratio_{key}"] > 0
            assert row[f"ratio_{key}"] == pytest.approx(row[f"rlx_{key}"] / row[f"trl_{key}"])
        assert f"{phase} rlx/TRL" in result["table"] and f"{phase} rlx/TRL" in result["cpu_table"]
    assert "step rlx/TRL" in printed
    assert json.loads(out.read_text())["rows"][0]["ratio_step"] == pytest.approx(row["ratio_step"])
