"""rank1_from_lora against torch.linalg.svd of the explicitly formed delta."""

import pytest
import torch

from rlx.extrapolation.rank1 import align_sign, rank1_from_lora


def _factors(g, out, inn, r, dtype=torch.float64):
    return torch.randn(r, inn, generator=g, dtype=dtype), torch.randn(out, r, generator=g, dtype=dtype)


@pytest.mark.parametrize(
    "out,inn,r,r0,scaling",
    [(20, 13, 4, None, 0.5), (13, 20, 4, 4, 2.0), (30, 30, 6, 3, 1.0), (5, 40, 3, 3, 0.25), (24, 16, 4, 4, -0.7)],
)
def test_rank1_matches_svd_of_formed_delta(out, inn, r, r0, scaling):
    g = torch.Generator().manual_seed(out * 100 + inn)
    A, B = _factors(g, out, inn, r)
    delta = scaling * (B @ A)  # [out, in]
    A0 = B0 = None
    if r0 is not None:
        A0, B0 = _factors(g, out, inn, r0)
        delta = delta - scaling * (B0 @ A0)
    U, S, Vh = torch.linalg.svd(delta)

    u, s, v = rank1_from_lora(A, B, scaling, A0, B0)

    assert torch.allclose(s, S[0], rtol=1e-10)
    assert torch.allclose(torch.linalg.norm(u), torch.tensor(1.0, dtype=u.dtype))
    sign = torch.sign(torch.dot(u, U[:, 0]))
    assert torch.allclose(u, sign * U[:, 0], atol=1e-9)
    assert torch.allclose(v, sign * Vh[0], atol=1e-9)
    assert torch.allclose(s * torch.outer(u, v), S[0] * torch.outer(U[:, 0], Vh[0]), atol=1e-9)
    assert u[u.abs().argmax()] > 0  # canonical sign


def test_rank1_float32_factors():
    g = torch.Generator().manual_seed(3)
    A, B = _factors(g, 48, 32, 8, dtype=torch.float32)
    A0 = A + 0.1 * torch.randn(A.shape, generator=g)
    B0 = torch.zeros_like(B)
    delta = (B.double() @ A.double()) * 0.125
    S = torch.linalg.svdvals(delta)
    u, s, v = rank1_from_lora(A, B, 0.125, A0, B0)
    assert u.dtype == torch.float32
    assert abs(float(s) - float(S[0])) <= 1e-5 * float(S[0])
    rebuilt = float(s) * torch.outer(u.double(), v.double())
    U, S_, Vh = torch.linalg.svd(delta)
    assert torch.allclose(rebuilt, S_[0] * torch.outer(U[:, 0], Vh[0]), atol=1e-5 * float(S[0]))


def test_sign_is_canonical_under_factor_sign_flips():
    g = torch.Generator().manual_seed(7)
    A, B = _factors(g, 16, 12, 3)
    u1, s1, v1 = rank1_from_lora(A, B, 1.0)
    u2, s2, v2 = rank1_from_lora(-A, -B, 1.0)  # same delta, different factors
    assert torch.allclose(u1, u2) and torch.allclose(v1, v2) and torch.allclose(s1, s2)


def test_align_sign_uses_both_sides():
    u, v = torch.tensor([1.0, -2.0]), torch.tensor([3.0, 4.0])
    s = torch.tensor(2.0)
    # u disagrees weakly (-2), v disagrees strongly (-4): flip both
    au, as_, av = align_sign((u, s, v), (torch.tensor([0.0, 1.0]), s, torch.tensor([0.0, -1.0])))
    assert torch.equal(au, -u) and torch.equal(av, -v) and float(as_) == 2.0
    # u disagrees (-2) but v agrees more (+4): keep
    au, _, av = align_sign((u, s, v), (torch.tensor([0.0, 1.0]), s, torch.tensor([0.0, 1.0])))
    assert torch.equal(au, u) and torch.equal(av, v)


def test_rank1_rejects_half_reference():
    g = torch.Generator().manual_seed(0)
    A, B = _factors(g, 8, 8, 2)
    with pytest.raises(ValueError, match="both A0 and B0"):
        rank1_from_lora(A, B, 1.0, A0=A)
