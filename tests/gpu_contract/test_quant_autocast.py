"""QuantLinear honours autocast on the Triton path as F.linear does on the torch path (issue 57).

Under `torch.autocast(bf16)` an fp32 activation reaches a linear layer, and F.linear runs it in bf16:
the torch path returns bf16. The Triton path must return the same dtype and the same values (up to
accumulation order), or a GPU run's activations change dtype at every quantized layer. The kernel runs
in the Triton interpreter on the CPU; `_use_triton`, rlx's own probe of whether x is on CUDA, is the
one stub. The interpreter mode is fixed at import, hence a child process."""

import textwrap

import pytest

from tests.quant.interpret import run_interpreted

pytestmark = pytest.mark.integration

pytest.importorskip("triton")


AUTOCAST = textwrap.dedent(
    """
    import torch
    from rlx.quant import QuantLinear, quantize

    gen = torch.Generator().manual_seed(0)
    n, k = 24, 64
    weight, bias = torch.randn(n, k, generator=gen) * 0.1, torch.randn(n, generator=gen)
    for fmt in ("nvfp4", "mxfp4", "nf4"):
        qt = quantize(weight, fmt)
        by_torch = QuantLinear(qt, bias, kernel="torch")
        by_triton = QuantLinear(qt, bias, kernel="triton")
        by_triton._use_triton = lambda x: True  # the CPU tensor stands in for a CUDA one
        x = torch.randn(2, 5, k, generator=gen, requires_grad=True)  # fp32, as autocast regions receive it
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y_torch, y_triton = by_torch(x), by_triton(x)
        assert y_torch.dtype == torch.bfloat16, y_torch.dtype
        assert y_triton.dtype == y_torch.dtype, (fmt, y_triton.dtype)
        torch.testing.assert_close(y_triton, y_torch, rtol=1e-2, atol=1e-2)
        # gradients reach the fp32 input through the cast, in its dtype
        (g_torch,) = torch.autograd.grad(y_torch.float().square().sum(), x)
        (g_triton,) = torch.autograd.grad(y_triton.float().square().sum(), x)
        assert g_triton.dtype == torch.float32
        torch.testing.assert_close(g_triton, g_torch, rtol=2e-2, atol=2e-2)
        # outside autocast nothing is cast: fp32 in, fp32 out on both paths
        assert by_triton(x.detach()).dtype == by_torch(x.detach()).dtype == torch.float32
    print("AUTOCAST_OK")
    """
)


def test_triton_path_returns_the_autocast_dtype_like_the_torch_path():
    run_interpreted(AUTOCAST, "AUTOCAST_OK")
