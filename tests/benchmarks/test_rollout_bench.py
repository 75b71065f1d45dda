"""The hf-vs-vllm rollout benchmark runs end to end at its smallest setting (timings are printed, never compared)."""

import importlib.util
import json
import math

import pytest

from benchmarks.rollout import main

pytestmark = [pytest.mark.integration, pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]


def test_rollout_bench_runs_tiny(tmp_path, capsys):
    out = tmp_path / "rollout.json"
    result = main(["--sizes", "1m", "--batches", "2x4", "--max-tokens", "8", "--repeats", "1", "--threads", "1",
                   "--kv-cache-gb", "0.05", "--out", str(out)])
    printed = capsys.readouterr().out
    (row,) = result["rows"]
    assert (row["size"], row["prompts"], row["completions"], row["seqs"], row["max_tokens"]) == ("1m", 2, 4, 8, 8)
    assert 0.9e6 < row["params"] < 1.1e6
    for name in ("hf", "vllm"):
        assert row[f"{name}_tok_s"] > 0
        (run,) = row["runs"][name]
        assert run["tokens"] == 8 * 8  # eos is never sampled: every completion runs to max_tokens
        assert row["full"][name] == 1.0
        assert row["sync_s"][name] >= 0
    assert math.isfinite(row["ratio"]) and row["ratio"] == pytest.approx(row["vllm_tok_s"] / row["hf_tok_s"])
    assert len(row["ratios"]) == 1 and row["ratios"][0] == pytest.approx(row["ratio"])
    assert "vllm/hf" in result["table"] and "vllm/hf" in printed
    assert json.loads(out.read_text())["rows"][0]["ratio"] == pytest.approx(row["ratio"])
