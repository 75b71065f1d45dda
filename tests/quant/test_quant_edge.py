"""Quantizer inputs at the edges (issue 31): meta tensors, subnormal NVFP4 global scales, and global
scales given as Python numbers or lists each give a defined result or an error naming the argument."""

import pytest
import torch

from rlx.quant.formats import dequantize, quantize

FORMATS = ("nvfp4", "nf4", "mxfp4")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_meta_tensor_is_refused_naming_the_meta_device(fmt):
    with pytest.raises(ValueError, match=f"{fmt}: the weight is on the meta device"):
        quantize(torch.empty(4, 64, device="meta"), fmt)  # main: "Tensor.item() cannot be called on meta tensors"


@pytest.mark.parametrize("gs", [1e-40, 1e-45, 3e-36])  # subnormal fp32; a normal one still too small
def test_a_global_scale_that_would_overflow_is_refused(gs):
    w = torch.randn(4, 32)
    with pytest.raises(ValueError, match=r"nvfp4: global_scale .* is below 7.9e-36 = 2688 / the largest torch.float32"):
        quantize(w, "nvfp4", global_scale=torch.tensor([gs]))  # main: NaN weights from finite input


def test_the_smallest_accepted_global_scale_dequantizes_finite_even_at_the_dtype_max():
    # 2688 / max(fp32) is the bound: |code| <= 6 times a block scale <= 448, divided by gs, stays <= max
    gs = 2688 / torch.finfo(torch.float32).max * 1.01
    w = torch.full((2, 32), torch.finfo(torch.float32).max / 2)
    w[1] = torch.linspace(-1, 1, 32)
    out = dequantize(quantize(w, "nvfp4", global_scale=torch.tensor([gs], dtype=torch.float32)))
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="below"):
        quantize(w, "nvfp4", global_scale=torch.tensor([gs * 0.9]))  # just under the bound


def test_a_python_number_global_scale_is_the_same_as_the_tensor():
    w = torch.randn(8, 32)
    a = dequantize(quantize(w, "nvfp4", global_scale=0.5))
    b = dequantize(quantize(w, "nvfp4", global_scale=torch.tensor([0.5])))
    assert torch.equal(a, b)  # main: AttributeError ('float' object has no attribute 'numel')


@pytest.mark.parametrize("gs", [[0.5], (0.5,), "0.5", object()])
def test_a_global_scale_of_another_type_is_refused_naming_it(gs):
    with pytest.raises(ValueError, match="nvfp4: global_scale must be an fp32 tensor with one element"):
        quantize(torch.randn(4, 32), "nvfp4", global_scale=gs)
