"""Smoke runs of the lean-compute benchmarks on the tiny model (their figures go to docs, not to tests)."""

import pytest

from tests.conftest import TINY


def test_update_bench_runs_every_setting(tmp_path):
    from benchmarks.update import DEFAULT_SETTINGS, main

    tiny = [f"--override={o}" for o in TINY if o.startswith("model.")]
    rows = main(["--model", "tiny", "--task", "arith", "--prompts", "3", "--group", "2", "--max-new", "6",
                 "--micro", "4", "--repeats", "1", "--work", str(tmp_path), *tiny])
    assert list(rows) == DEFAULT_SETTINGS.split(",")
    # the levers remove work: fewer decoder token slots with a token budget and a shared prefix,
    # fewer head tokens once padding is skipped
    assert rows["lean"]["decoder_tokens"] < rows["plain"]["decoder_tokens"]
    assert rows["chunk"]["head_tokens"] <= rows["plain"]["head_tokens"]
    assert all(r["cpu_s"] > 0 for r in rows.values())


@pytest.mark.integration
@pytest.mark.parametrize("conditions", ["idle,busy"])
def test_threads_bench_runs_idle_and_busy(tmp_path, conditions):
    from benchmarks.threads import main

    extra = [f"--override={o}" for o in TINY if not o.startswith(("train.", "logger.", "trainer."))]
    # one setting: `auto` is the one rlx decides (the cores other processes leave free), so the one the spinner moves
    rows = main(["--steps", "3", "--repeats", "1", "--settings", "auto", "--conditions", conditions,
                 "--out", str(tmp_path / "threads.json"), *extra])
    assert set(rows) == {"auto"} and all(v["idle"] > 0 and v["busy"] > 0 for v in rows.values())


def test_update_bench_counts_a_packed_base_as_the_dense_one():
    """A QeRL base is dequantized then multiplied densely: the FLOP estimate must not drop its layers."""
    import torch

    from benchmarks.update import dequantize_seconds, flops
    from rlx.quant import QuantConfig, quantize_model
    from tests.quant.quant_helpers import tiny_qwen

    model = tiny_qwen(dtype=torch.float32)
    slots = {"decoder_tokens": 100, "attn_slot_ctx": 1000, "head_tokens": 40}
    dense = flops(model, slots, chunked=True)
    assert dequantize_seconds(model) is None
    quantize_model(model, QuantConfig(format="nvfp4"))
    assert flops(model, slots, chunked=True) == dense
    assert dequantize_seconds(model) > 0


def test_dtype_bench_times_both_dtypes():
    from benchmarks.dtype import main

    out = main(["--repeats", "1", "--calls", "1"])
    assert out["fp32_s"] > 0 and out["bf16_s"] > 0 and out["ratio"] == out["bf16_s"] / out["fp32_s"]
