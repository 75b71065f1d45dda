"""NVFP4: bit-exact against compressed-tensors, close to torchao, hand-checked ties, clear errors."""

import pytest
import torch

from rlx.quant import dequantize, quantize
from rlx.quant.fp4 import E2M1_MAGNITUDES
from rlx.quant.nvfp4 import nvfp4_global_scale, shared_global_scale
from tests.quant.quant_helpers import DTYPES, ct_global_scale, ct_nvfp4

pytest.importorskip("compressed_tensors")


def assert_matches_ct(weight: torch.Tensor, global_scale: torch.Tensor | None = None) -> None:
    ref = ct_nvfp4(weight, global_scale)
    ours = quantize(weight, "nvfp4", **({} if global_scale is None else {"global_scale": global_scale}))
    assert torch.equal(ours.global_scale, ref["weight_global_scale"].reshape(1))
    assert ours.scale.dtype == ref["weight_scale"].dtype == torch.float8_e4m3fn
    assert torch.equal(ours.scale.view(torch.uint8), ref["weight_scale"].view(torch.uint8)), "block scales differ"
    mismatch = (ours.packed != ref["weight_packed"]).sum().item()
    assert mismatch == 0, f"{mismatch} packed bytes differ from compressed-tensors"


@pytest.mark.integration
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(16, 16), (48, 160), (257, 64)])
@pytest.mark.parametrize("std", [0.02, 3.0])
def test_random_weights_bit_exact(dtype, shape, std):
    gen = torch.Generator().manual_seed(hash((shape, std)) % 2**31)
    # rows of very different magnitude: exercises many block scales inside one global scale
    weight = torch.randn(shape, generator=gen) * std * torch.exp(2 * torch.randn(shape[0], 1, generator=gen))
    assert_matches_ct(weight.to(dtype))


@pytest.mark.integration
@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_cases_bit_exact(dtype):
    finfo = torch.finfo(dtype)
    gen = torch.Generator().manual_seed(3)
    weight = (torch.randn(12, 64, generator=gen) * 0.05).to(dtype)
    weight[0, :16] = 0.0  # all-zero block -> scale 0 -> replaced by 0.125
    weight[1, 16:32] = -0.0  # negative zeros
    weight[2, :16] = torch.tensor([-1e-6, 1e-6] * 8, dtype=dtype)  # tiny block inside a normal tensor
    weight[3, :] = finfo.tiny  # smallest normal value everywhere in a row
    weight[4, 32:48] = -weight[4, 32:48].abs()  # all-negative block
    weight[5, :16] = weight[5, 0]  # constant block: every element hits the block amax
    weight[6, 48:] = torch.tensor([0.01, -0.004] * 8, dtype=dtype)  # small values that round to -0 codes
    assert_matches_ct(weight)


@pytest.mark.integration
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("magnitude", ["tiny", "huge"])
def test_extreme_magnitudes_bit_exact(dtype, magnitude):
    finfo = torch.finfo(dtype)
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(8, 32, generator=gen)
    if magnitude == "tiny":  # fp16: amax < ~0.041 makes 2688/amax overflow -> global scale 1.0
        weight = (base * (finfo.tiny * 8)).to(dtype)
    else:
        weight = (base / base.abs().max() * finfo.max / 4).to(dtype)
    assert_matches_ct(weight)


@pytest.mark.integration
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_zero_tensor(dtype):
    weight = torch.zeros(4, 32, dtype=dtype)
    assert_matches_ct(weight)
    qt = quantize(weight, "nvfp4")
    assert qt.global_scale.item() == 1.0  # 2688 / tiny overflows -> compressed-tensors' fallback
    assert torch.all(qt.scale.float() == 0.125) and torch.all(qt.packed == 0)


def test_fp16_small_amax_global_scale_is_one():
    """Hand check of the documented fp16 quirk: dt(1/amax) * 2688 overflows fp16 when amax < ~0.041."""
    weight = torch.full((1, 16), 0.03, dtype=torch.float16)
    assert quantize(weight, "nvfp4").global_scale.item() == 1.0
    assert quantize(weight.to(torch.bfloat16), "nvfp4").global_scale.item() > 1.0


# E2M1 ties, scaled values t: RNE gives 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
TIES = [6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, 0.0]
TIE_VALUES = [6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -1.0, -1.0, -2.0, -2.0, -4.0, -4.0, 0.0]


def tie_weight(dtype: torch.dtype) -> torch.Tensor:
    """Global amax 2.625 gives global scale 2688/2.625 = 1024 exactly (in every dtype); a block
    [6c, t*c...] with c a power of two then has scale fp8(1024*c), so w / (s / gs) = t exactly."""
    rows = [[2.625] + [0.0] * 15]
    for c in (0.25, 2.0**-6, 2.0**-9):
        rows.append([t * c for t in TIES])
    return torch.tensor(rows, dtype=dtype)


@pytest.mark.integration
@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_ties_round_to_even(dtype):
    weight = tie_weight(dtype)
    ref = ct_nvfp4(weight)
    assert ref["weight_global_scale"].item() == 1024.0  # the construction holds in the reference too
    assert_matches_ct(weight)
    qt = quantize(weight, "nvfp4")
    packed = qt.packed[1:]  # [3, 8] tie rows
    codes = torch.stack((packed & 15, packed >> 4), dim=-1).flatten(1)  # [3, 16], low nibble first
    magnitudes = torch.tensor(E2M1_MAGNITUDES)[(codes & 7).long()]
    expected = torch.tensor(TIE_VALUES).abs().expand_as(magnitudes)
    assert torch.equal(magnitudes, expected)
    negative = torch.tensor([t < 0 for t in TIES]).expand_as(codes)
    assert torch.equal((codes & 8) != 0, negative)  # -0.25 -> code 8 (negative zero), 0.0 -> code 0
    deq = dequantize(qt, torch.float32)[1:]
    for row, c in zip(deq, (0.25, 2.0**-6, 2.0**-9)):
        assert torch.equal(row, torch.tensor(TIE_VALUES) * c)


def test_dequantize_matches_compressed_tensors_decompress():
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization.quant_scheme import NVFP4A16, QuantizationScheme

    weight = torch.randn(32, 128, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    qt = quantize(weight, "nvfp4")
    state = {"weight_packed": qt.packed, "weight_scale": qt.scale, "weight_global_scale": qt.global_scale}
    ref = NVFP4PackedCompressor.decompress(state, QuantizationScheme(targets=["Linear"], **NVFP4A16))
    assert torch.equal(dequantize(qt, torch.bfloat16), ref["weight"])


@pytest.mark.integration
def test_shared_global_scale_is_llm_compressor_minimum():
    gen = torch.Generator().manual_seed(4)
    weights = [torch.randn(16, 32, generator=gen).to(torch.bfloat16) * s for s in (0.5, 2.0, 1.0)]
    expected = torch.min(torch.cat([ct_global_scale(w) for w in weights]))
    shared = shared_global_scale(weights)
    assert torch.equal(shared, expected.reshape(1))
    for w in weights:  # each member quantized with the shared scale still equals compressed-tensors
        assert_matches_ct(w, shared)


def test_global_scale_helper_matches_reference():
    for amax in (1e-3, 0.0421, 0.37, 5.0, 300.0):
        for dtype in DTYPES:
            t = torch.tensor(amax, dtype=dtype)
            assert torch.equal(nvfp4_global_scale(t), ct_global_scale(t.reshape(1)).reshape(1))


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_weight_is_rejected(bad):
    weight = torch.randn(4, 32)
    weight[2, 5] = bad
    with pytest.raises(ValueError, match="inf or nan"):
        quantize(weight, "nvfp4")


def test_in_features_not_multiple_of_block_is_rejected():
    with pytest.raises(ValueError, match="in_features=40 is not a multiple of the nvfp4 block size 16"):
        quantize(torch.randn(8, 40), "nvfp4")


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="2-D"):
        quantize(torch.randn(2, 4, 16), "nvfp4")
    with pytest.raises(ValueError, match="dtype"):
        quantize(torch.ones(4, 16, dtype=torch.float64), "nvfp4")
    with pytest.raises(ValueError, match="unknown quant format"):
        quantize(torch.randn(4, 16), "int3")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dequantized_close_to_torchao(dtype):
    """torchao's NVFP4 (no bf16 roundings in the scales, reciprocal multiply) as an independent reference.

    Documented tolerance: every element within two E2M1 steps of its block (|diff| <= 2 * s / gs,
    the largest E2M1 step is 2), >= 95% of codes identical, relative L2 difference < 5%; fp32
    weights give identical codes and scales and agree to 1e-6 relative.
    """
    pytest.importorskip("torchao")
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    weight = (torch.randn(128, 256, generator=torch.Generator().manual_seed(11)) * 0.02).to(dtype)
    ref_t = NVFP4Tensor.to_nvfp4(weight, per_tensor_scale=per_tensor_amax_to_scale(weight.abs().amax()))
    ref = ref_t.dequantize(torch.float32)
    qt = quantize(weight, "nvfp4")
    ours = dequantize(qt, torch.float32)
    step = (qt.scale.float() / qt.global_scale).repeat_interleave(16, dim=1)
    diff = (ours - ref).abs()
    assert torch.all(diff <= 2 * step * (1 + 1e-6))
    assert (qt.packed == ref_t.qdata.view(torch.uint8)).float().mean() >= 0.95
    assert diff.norm() / ref.norm() < 0.05
    if dtype == torch.float32:
        assert torch.equal(qt.packed, ref_t.qdata.view(torch.uint8))
        assert torch.equal(qt.scale.view(torch.uint8), ref_t.scale.view(torch.uint8))
        torch.testing.assert_close(ours, ref, rtol=1e-6, atol=0)
