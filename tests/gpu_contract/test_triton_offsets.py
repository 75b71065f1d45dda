"""The Triton kernel's pointer offsets are 64-bit: an input whose row offsets pass 2^31 elements is read
where it lies (issue 57). With int32 offsets `row * stride` wraps negative and the load leaves the
tensor: the interpreter, which computes offsets in numpy int32 exactly as the GPU code does, crashes.

The input is a strided view of a storage of 2^31 + 2^22 bf16 elements (4 GiB of address space) of
which only the three touched rows are ever written, so the test needs a few pages of memory."""

import textwrap

import pytest

from tests.quant.interpret import run_interpreted

pytestmark = pytest.mark.integration

pytest.importorskip("triton")


PAST_2_31 = textwrap.dedent(
    """
    import torch
    from rlx.quant import dequantize, quantize
    from rlx.quant import triton_kernels as tk

    gen = torch.Generator().manual_seed(0)
    n, k, rows = 20, 64, 3
    stride = (1 << 30) + (1 << 21)  # row 2 starts at 2^31 + 2^22 elements: past int32
    assert (rows - 1) * stride >= 1 << 31
    storage = torch.empty((rows - 1) * stride + k, dtype=torch.bfloat16)  # untouched pages stay unallocated
    x = storage.as_strided((rows, k), (stride, 1))  # [3, K], rows 2^30 + 2^21 elements apart
    x.copy_(torch.randn(rows, k, generator=gen).to(torch.bfloat16))
    for fmt in ("nvfp4", "nf4"):
        qt = quantize(torch.randn(n, k, generator=gen) * 0.1, fmt)
        bias = torch.randn(n, generator=gen).to(torch.bfloat16)
        out = tk.quant_matmul(x, qt, bias)  # [3, N]
        ref = torch.nn.functional.linear(x.contiguous(), dequantize(qt, torch.bfloat16), bias)
        torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)
        assert out[2].abs().sum() > 0, "row past 2^31 read as zeros"
    print("OFFSETS_OK")
    """
)


def test_rows_past_2_31_elements_are_read_where_they_lie():
    run_interpreted(PAST_2_31, "OFFSETS_OK")
