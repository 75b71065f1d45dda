"""benchmarks.generation's format comparison (--quants): labels, argument checks and the printed ratios, on
hand-made rows (the bench itself needs SmolLM2; its figures are in docs/quant.md, never a test's pass/fail)."""

import pytest

from benchmarks import generation as g


def test_labels_name_the_format_only_when_formats_are_compared():
    assert g.label("vllm", "none", ["none"]) == "vllm"
    assert g.label("vllm", "nvfp4", ["nvfp4"]) == "vllm|nvfp4"  # a lone quantized run still says what it ran
    assert g.label("vllm@vllm.kv_cache_gb=0.25", "nvfp4", ["none", "nvfp4"]) == "vllm@vllm.kv_cache_gb=0.25|nvfp4"


@pytest.mark.parametrize("quants, says", [("none,int3", "int3"), ("none,none", "a repeat"), (",", "empty")])
def test_unknown_or_repeated_formats_are_refused_before_any_model(quants, says):
    with pytest.raises(SystemExit, match=says):
        g.main(["--engines", "vllm", "--quants", quants])


def _row(spec, quant, tok_s, tok_cpu_s, budget=160, batch=16):
    return {"spec": spec, "quant": quant, "budget": budget, "batch": batch, "tok_s": tok_s, "tok_cpu_s": tok_cpu_s}


def test_ratios_are_medians_over_the_first_format():
    quants = ["none", "nvfp4"]
    rows = [_row("vllm", "none", 100.0, 90.0), _row("vllm", "none", 120.0, 110.0), _row("vllm", "none", 80.0, 70.0),
            _row("vllm", "nvfp4", 95.0, 45.0), _row("vllm", "nvfp4", 105.0, 55.0), _row("vllm", "nvfp4", 10.0, 5.0)]
    syncs = [{"engine": "vllm|none", "wall_s": 0.2}, {"engine": "vllm|none", "wall_s": 0.4},
             {"engine": "vllm|nvfp4", "wall_s": 1.0}, {"engine": "vllm|nvfp4", "wall_s": 1.4}]
    lines = g.ratios(rows, syncs, quants)
    # sync: median 1.2 s over median 0.3 s = 4.00
    assert lines[0] == "vllm: sync nvfp4 / none = 4.00 (1.20 s / 0.30 s, median of 2)"
    # tok/s: median(95, 105, 10) = 95 over median(100, 120, 80) = 100 -> 0.95; per CPU-s 45 / 90 = 0.50
    assert lines[1] == "vllm budget 160 batch 16: tok/s nvfp4 / none = 0.95 (95.0 / 100.0); per CPU-s 0.50"
    assert g.ratios(rows, syncs, ["none"]) == []  # one format: nothing to compare


def test_a_quant_override_is_refused_for_the_quants_option():
    with pytest.raises(SystemExit, match=r"quant=nf4: the base's format comes from --quants \(e.g. --quants nf4\)"):
        g.main(["--engines", "vllm", "quant=nf4"])


def test_each_repeat_starts_the_arms_one_later():
    assert [g.rotated(["a", "b", "c"], k) for k in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
