"""Triton fused dequant-matmul, run on CPU by the Triton interpreter (TRITON_INTERPRET=1).

The interpreter mode is fixed when a kernel is decorated, so the checks run in a child process.
"""

import textwrap

import pytest

from tests.quant.interpret import run_interpreted

pytest.importorskip("triton")

CHECKS = textwrap.dedent(
    """
    import torch
    from rlx.quant import dequantize, quantize
    from rlx.quant import triton_kernels as tk

    gen = torch.Generator().manual_seed(0)
    # nf4 with K=48: its 64-blocks run over the flattened weight, so scale blocks straddle rows
    cases = [("nvfp4", {}, 20, 32), ("mxfp4", {}, 20, 32), ("nf4", {}, 20, 64), ("nf4", {"double_quant": True}, 12, 48)]
    for fmt, kw, n, k in cases:
        qt = quantize(torch.randn(n, k, generator=gen) * 0.1, fmt, **kw)
        for dtype in (torch.float32, torch.bfloat16):
            # identity input: the output is the kernel's decoded weight, bit for bit
            eye = torch.eye(k, dtype=dtype)
            decoded = tk.quant_matmul(eye, qt).T
            assert torch.equal(decoded, dequantize(qt, dtype)), (fmt, kw, dtype, "decode")
        # random input with bias: close to the torch path, and differentiable w.r.t. x
        x = torch.randn(2, 3, k, generator=gen, requires_grad=True)
        bias = torch.randn(n, generator=gen)
        y = tk.quant_linear(x, qt, bias)
        ref = torch.nn.functional.linear(x, dequantize(qt, torch.float32), bias)
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
        (grad,) = torch.autograd.grad(y.square().sum(), x)
        (ref_grad,) = torch.autograd.grad(ref.square().sum(), x)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-5)
    print("TRITON_OK")
    """
)


@pytest.mark.integration
def test_triton_kernel_matches_torch_path_in_interpreter():
    run_interpreted(CHECKS, "TRITON_OK")


def test_kernel_choice():
    import torch

    from rlx.quant import QuantLinear, quantize

    layer = QuantLinear(quantize(torch.randn(16, 32), "nvfp4"), kernel="auto")
    assert not layer._use_triton(torch.randn(2, 32))  # CPU input -> torch path
    with pytest.raises(ValueError, match="kernel"):
        QuantLinear(quantize(torch.randn(16, 32), "nvfp4"), kernel="cutlass")


@pytest.mark.integration
@pytest.mark.parametrize(
    "fmt, dtype",  # together: every constexpr branch once; the mxfp4 case only adds the e8m0 decode
    [("nvfp4", "bf16"), ("nf4", "fp16"), pytest.param("mxfp4", "fp32", marks=pytest.mark.slow)],
)
def test_kernel_compiles_for_hopper(fmt, dtype, tmp_path, monkeypatch):
    """Ahead-of-time compile to an sm_90 cubin (no GPU needed): catches GPU-only lowering errors. 16-row tiles;
    tests/gpu_contract/test_triton_aot.py compiles the 64-row, split-K and sm_100 variants."""
    pytest.importorskip("triton.backends.nvidia")
    from tests.gpu_contract.test_triton_aot import compile_for

    compile_for(tmp_path, monkeypatch, fmt, dtype, block_m=16)
