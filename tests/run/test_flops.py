"""perf/compute/flops counts a quantized base like its 16-bit original (packed weights are buffers)."""

import pytest

from tests.conftest import TINY, compose

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fmt", ["nvfp4", "nf4"])
def test_quantized_policy_counts_its_packed_weights(tmp_path, fmt):
    from rlx.models import count_params
    from rlx.train import build

    full = build(compose(TINY), tmp_path / "full")
    quant = build(compose(TINY + [f"quant={fmt}"]), tmp_path / fmt)
    try:
        buffers_only = sum(q.numel() for q in quant.policy.parameters())
        assert buffers_only < 0.8 * full.n_params  # what the old count saw
        assert quant.n_params == full.n_params == count_params(full.policy)
    finally:
        full.engine.close()
        quant.engine.close()
