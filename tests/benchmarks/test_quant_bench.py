"""The benchmark runs end to end at a small size (its timings are printed, never asserted)."""

import pytest

from benchmarks.quant import main

pytestmark = pytest.mark.integration


def test_bench_runs_small(capsys):
    pytest.importorskip("compressed_tensors")
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("torchao")
    results = main(["--size", "256", "--repeats", "1", "--tokens", "4"])
    out = capsys.readouterr().out
    assert set(results) == {"nvfp4", "nf4", "mxfp4"}
    for fmt in results:
        assert fmt in out
    # 4 bits + one fp8 scale per 16 (nvfp4), fp32 absmax per 64 (nf4), e8m0 per 32 (mxfp4)
    assert results["nvfp4"]["bytes_ratio"] == pytest.approx((0.5 + 1 / 16) / 2, abs=1e-4)
    assert results["nf4"]["bytes_ratio"] == pytest.approx((0.5 + 4 / 64) / 2)
    assert results["mxfp4"]["bytes_ratio"] == pytest.approx((0.5 + 1 / 32) / 2)
    for r in results.values():
        assert 0.03 < r["rel_l2"] < 0.2  # 4-bit error on Gaussian weights
        assert r["quant_x"] is not None and r["fwd_ratio"] > 0
