"""Split-K decode in the Triton kernel (issue 57): at M <= 16 on CUDA a 7B projection's grid has a few
dozen programs for 100+ SMs, so K is split into ranges whose fp32 partial sums torch adds in a fixed
order. Checked in the Triton interpreter against the one-pass kernel and the torch path; the choice of
split is checked with `_sm_count`, rlx's own probe of the GPU, stubbed."""

import textwrap

import pytest

from tests.quant.interpret import run_interpreted

pytest.importorskip("triton")


SPLIT = textwrap.dedent(
    """
    import torch
    from rlx.quant import dequantize, quantize
    from rlx.quant import triton_kernels as tk

    gen = torch.Generator().manual_seed(0)
    n, k = 40, 320  # 160 byte columns: 5 blocks of 32, so 4 ranges leave a short last one
    for fmt in ("nvfp4", "mxfp4", "nf4"):
        qt = quantize(torch.randn(n, k, generator=gen) * 0.1, fmt)
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(3, k, generator=gen).to(dtype)
            bias = torch.randn(n, generator=gen).to(dtype)
            one = tk.quant_matmul(x, qt, bias, split_k=1)
            split = tk.quant_matmul(x, qt, bias, split_k=4)
            assert split.dtype == dtype and split.shape == (3, n)
            ref = torch.addmm(bias.float(), x.float(), dequantize(qt, dtype).float().T)  # bias counted once
            tol = 1e-5 if dtype == torch.float32 else 1e-2
            torch.testing.assert_close(split.float(), ref, rtol=tol, atol=tol)
            torch.testing.assert_close(split, one, rtol=tol, atol=tol)
            assert torch.equal(split, tk.quant_matmul(x, qt, bias, split_k=4)), "split-K is not deterministic"
        # identity input through split ranges: still the decoded weight, bit for bit
        eye = torch.eye(k)
        assert torch.equal(tk.quant_matmul(eye[:16], qt, split_k=5), dequantize(qt, torch.float32)[:, :16].T)
    print("SPLIT_OK")
    """
)


@pytest.mark.integration
def test_split_k_matches_one_pass_and_torch_in_interpreter():
    run_interpreted(SPLIT, "SPLIT_OK")


def test_split_only_for_decode_on_cuda(monkeypatch):
    import torch

    from rlx.quant import triton_kernels as tk

    monkeypatch.setattr(tk, "_sm_count", lambda index: 132)  # an H100 SXM
    cuda = torch.device("cuda", 0)
    # 7B decode: down_proj [3584, 18944] has 56 column tiles; 264 programs wanted -> 5 ranges
    assert tk.split_k_for(1, 3584, 18944, cuda) == 5
    assert tk.split_k_for(16, 4608, 3584, cuda) == 4
    assert tk.split_k_for(17, 3584, 18944, cuda) == 1  # 64-row tiles: M fills the grid
    assert tk.split_k_for(1, 3584, 18944, torch.device("cpu")) == 1
    assert tk.split_k_for(1, 64, 128, cuda) == 1  # 2 K blocks: too short to split
    assert tk.split_k_for(1, 64, 1 << 16, cuda) == tk.MAX_SPLIT_K
