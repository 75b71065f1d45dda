"""MXFP4: codes, E8M0 scales and dequantized values equal torchao's MX reference (to_mx, floor mode)."""

import pytest
import torch

from rlx.quant import dequantize, quantize
from rlx.quant.mxfp4 import e8m0_to_float

mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")


def torchao_mxfp4(weight: torch.Tensor):
    scale, data = mx.to_mx(weight.contiguous(), torch.float4_e2m1fn_x2, 32)
    return scale.view(torch.uint8), data.view(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(16, 32), (80, 256)])
def test_equal_to_torchao(dtype, shape):
    gen = torch.Generator().manual_seed(shape[1])
    weight = (torch.randn(shape, generator=gen) * torch.exp(2 * torch.randn(shape[0], 1, generator=gen))).to(dtype)
    weight[0, :32] = 0.0  # all-zero block
    weight[1, :32] = -0.0  # negative zeros keep their sign bit, as in torchao
    weight[2, :32] = 1e-30  # tiny block
    scale, data = torchao_mxfp4(weight)
    qt = quantize(weight, "mxfp4")
    assert torch.equal(qt.scale, scale)
    assert torch.equal(qt.packed, data)
    ref = mx.to_dtype(data, scale.view(torch.float8_e8m0fnu), torch.float4_e2m1fn_x2, 32, dtype)
    assert torch.equal(dequantize(qt, dtype), ref)


def test_fp16_weights_quantize_like_their_fp32_copy():
    weight = torch.randn(8, 64, generator=torch.Generator().manual_seed(1)).to(torch.float16)
    ours, ref = quantize(weight, "mxfp4"), quantize(weight.float(), "mxfp4")
    assert torch.equal(ours.packed, ref.packed) and torch.equal(ours.scale, ref.scale)


def test_hand_computed_block():
    """amax 3 -> floor(log2 3) = 1 -> scale 2^(1-2) = 0.5; w / 0.5 rounds to E2M1 (ties to even)."""
    weight = torch.zeros(1, 32)
    weight[0, :6] = torch.tensor([3.0, 0.375, -1.25, 2.25, 0.125, -0.0])
    qt = quantize(weight, "mxfp4")
    assert qt.scale.tolist() == [[126]]  # 2^-1 biased by 127
    assert e8m0_to_float(qt.scale).item() == 0.5
    codes = torch.stack((qt.packed[0] & 15, qt.packed[0] >> 4), dim=-1).flatten()[:6].tolist()
    # 6 -> 7 (6.0); 0.75 -> 2 (1.0, tie to even); -2.5 -> 8|4 (-2.0, tie); 4.5 -> 6 (4.0); 0.25 -> 0; -0 -> 8
    assert codes == [7, 2, 12, 6, 0, 8]
    assert dequantize(qt, torch.float32)[0, :6].tolist() == [3.0, 0.5, -1.0, 2.0, 0.0, -0.0]


def test_errors():
    with pytest.raises(ValueError, match="in_features=48 is not a multiple of the mxfp4 block size 32"):
        quantize(torch.randn(4, 48), "mxfp4")
    weight = torch.randn(4, 32)
    weight[0, 0] = float("inf")
    with pytest.raises(ValueError, match="inf or nan"):
        quantize(weight, "mxfp4")
