"""NF4: codes and absmax bit-exact against bitsandbytes' CPU quantize_4bit, double quantization too."""

import pytest
import torch

from rlx.quant import dequantize, quantize
from rlx.quant.nf4 import NF4_VALUES, dynamic_map
from tests.quant.quant_helpers import DTYPES

bnb_f = pytest.importorskip("bitsandbytes.functional")

# bitsandbytes' pure-torch ("default") kernels, reachable on CPU tensors by redispatching
_DEFAULT = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def bnb_default_blockwise(values: torch.Tensor, blocksize: int = 256):
    return torch.ops.bitsandbytes.quantize_blockwise.default.redispatch(
        _DEFAULT, values, bnb_f.create_dynamic_map(), blocksize
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(32, 128), (96, 512), (7, 32), (33, 96), (3, 2)])
def test_codes_and_absmax_equal_bitsandbytes(dtype, shape):
    weight = (torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))) * 0.05).to(dtype)
    weight.view(-1)[:64] = 0.0  # an all-zero block
    packed, state = bnb_f.quantize_4bit(weight, blocksize=64, quant_type="nf4")
    qt = quantize(weight, "nf4")
    assert torch.equal(qt.packed.flatten(), packed.flatten()), "NF4 codes differ from bitsandbytes"
    assert torch.equal(qt.scale, state.absmax)
    if shape[1] % 64 == 0:  # bitsandbytes' CPU dequant kernel assumes row-aligned blocks
        assert torch.equal(dequantize(qt), bnb_f.dequantize_4bit(packed, state))
    # in general: code value * absmax of the flattened 64-block, rounded once (bitsandbytes' torch kernel)
    codes = torch.stack((packed.flatten() >> 4, packed.flatten() & 15), dim=-1).flatten().long()  # high first
    block = torch.arange(codes.numel()) // 64
    expected = (bnb_f.get_4bit_type("nf4", device="cpu")[codes] * state.absmax[block]).view(shape).to(dtype)
    assert torch.equal(dequantize(qt), expected)


def test_midpoint_goes_to_lower_code_and_high_nibble_first():
    """Hand check: block absmax 1, so the normalized values are the weights themselves."""
    values = torch.tensor(NF4_VALUES)
    mid = ((values[7] + values[8]) / 2).item()  # between 0 and 0.0796 -> lower code 7
    weight = torch.zeros(1, 64)
    weight[0, :4] = torch.tensor([1.0, mid, -1.0, 0.5626170039176941])
    qt = quantize(weight, "nf4")
    codes = torch.stack((qt.packed[0] >> 4, qt.packed[0] & 15), dim=-1).flatten()[:4]
    assert codes.tolist() == [15, 7, 0, 13]
    assert qt.packed[0, 0].item() == (15 << 4) | 7  # element 0 in the HIGH nibble
    packed, _ = bnb_f.quantize_4bit(weight, blocksize=64, quant_type="nf4")
    assert torch.equal(qt.packed.flatten(), packed.flatten())


def test_codebook_and_dynamic_map_match_bitsandbytes():
    assert torch.equal(torch.tensor(NF4_VALUES), bnb_f.get_4bit_type("nf4", device="cpu"))
    assert torch.equal(dynamic_map(), bnb_f.create_dynamic_map())


@pytest.mark.parametrize("dtype", DTYPES)
def test_double_quant_state_matches_bitsandbytes(dtype):
    weight = (torch.randn(64, 320, generator=torch.Generator().manual_seed(2)) * 0.05).to(dtype)
    packed, state = bnb_f.quantize_4bit(weight, blocksize=64, quant_type="nf4", compress_statistics=True)
    qt = quantize(weight, "nf4", double_quant=True)
    assert torch.equal(qt.packed.flatten(), packed.flatten())
    assert torch.equal(qt.scale_offset, state.offset)
    assert torch.equal(qt.scale_absmax, state.state2.absmax)
    # scale codes: 100% equal to bitsandbytes' reference (pure-torch) blockwise kernel
    absmax = quantize(weight, "nf4").scale
    ref_codes, ref_absmax = bnb_default_blockwise(absmax - absmax.mean())
    assert torch.equal(qt.scale, ref_codes) and torch.equal(qt.scale_absmax, ref_absmax)
    # bitsandbytes' CPU C kernel searches approximately: where it differs, ours is the nearer value
    code = dynamic_map()
    normed = (absmax - state.offset) / state.state2.absmax.repeat_interleave(256)[: absmax.numel()]
    differs = qt.scale != state.absmax
    assert differs.float().mean() < 0.01
    ours_err = (code[qt.scale.long()] - normed).abs()
    bnb_err = (code[state.absmax.long()] - normed).abs()
    assert torch.all(ours_err[differs] < bnb_err[differs])
    # dequantization through bitsandbytes with our codes gives our weights exactly
    state.absmax = qt.scale
    assert torch.equal(dequantize(qt), bnb_f.dequantize_4bit(packed, state))


def test_double_quant_saves_memory_and_stays_close():
    weight = torch.randn(128, 512, generator=torch.Generator().manual_seed(8)) * 0.02
    plain, dq = quantize(weight, "nf4"), quantize(weight, "nf4", double_quant=True)
    assert dq.nbytes() < plain.nbytes()
    torch.testing.assert_close(dequantize(dq), dequantize(plain), rtol=0.02, atol=1e-4)


def test_non_finite_and_odd_in_features_are_rejected():
    weight = torch.randn(4, 64)
    weight[1, 3] = float("nan")
    with pytest.raises(ValueError, match="inf or nan"):
        quantize(weight, "nf4")
    with pytest.raises(ValueError, match="in_features=33"):
        quantize(torch.randn(4, 33), "nf4")


def test_non_finite_in_trailing_partial_block_is_rejected():
    weight = torch.randn(3, 30)  # 90 elements: one full block of 64 and a tail of 26
    weight[2, 29] = float("inf")
    with pytest.raises(ValueError, match="inf or nan"):
        quantize(weight, "nf4")
