"""Folding a rank-1 jump into rank-r LoRA factors, checked against dense SVD (Eckart-Young)."""

import pytest
import torch

from rlx.extrapolation.fold import fold_into_lora, fold_rank1

F64 = torch.float64


def _unit(x):
    return x / torch.linalg.norm(x)


def _setup(seed, out=24, inn=20, r=4):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(r, inn, generator=g, dtype=F64)
    B = 0.1 * torch.randn(out, r, generator=g, dtype=F64)
    u = _unit(torch.randn(out, generator=g, dtype=F64))
    v = _unit(torch.randn(inn, generator=g, dtype=F64))
    return g, A, B, u, v


def test_fold_exact_when_old_delta_is_rank_deficient():
    g, A, B, u, v = _setup(0)
    B = B[:, :3] @ torch.randn(3, 4, generator=g, dtype=F64)  # rank(B A) = 3, +1 jump = 4 = r
    scaling, sigma = 0.5, 0.3
    intended = scaling * B @ A + sigma * torch.outer(u, v)
    A_new, B_new, dropped = fold_rank1(A, B, scaling, u, sigma, v)
    assert A_new.shape == A.shape and B_new.shape == B.shape
    assert torch.allclose(scaling * B_new @ A_new, intended, atol=1e-12)
    assert float(dropped.abs().max()) < 1e-12


def test_fold_keeps_A_when_jump_lies_in_its_row_space():
    g, A, B, u, _ = _setup(1)
    v = _unit(A.T @ torch.randn(4, generator=g, dtype=F64))  # v in rowspace(A): exact, only B moves
    scaling, sigma = 2.0, 0.7
    A_new, B_new, _ = fold_rank1(A, B, scaling, u, sigma, v)
    assert torch.allclose(scaling * B_new @ A_new, scaling * B @ A + sigma * torch.outer(u, v), atol=1e-12)
    assert torch.allclose(A_new, A, atol=1e-12)


@pytest.mark.parametrize("sigma", [0.05, 0.5, 5.0])
def test_fold_truncation_is_the_optimal_rank_r_approximation(sigma):
    _, A, B, u, v = _setup(2)
    scaling, r = 0.5, A.shape[0]
    intended = scaling * B @ A + sigma * torch.outer(u, v)  # rank r + 1
    U, S, Vh = torch.linalg.svd(intended)
    best = (U[:, :r] * S[:r]) @ Vh[:r]  # Eckart-Young rank-r optimum

    A_new, B_new, dropped = fold_rank1(A, B, scaling, u, sigma, v)
    folded = scaling * B_new @ A_new

    assert torch.allclose(folded, best, atol=1e-10)
    assert torch.allclose(torch.linalg.matrix_norm(folded - intended, ord=2), S[r], rtol=1e-8)
    assert torch.allclose(scaling * dropped[0], S[r], rtol=1e-8)
    # Weyl: the dropped value is at most min(jump size, weakest direction of the old delta)
    old_sv = torch.linalg.svdvals(scaling * B @ A)
    assert float(S[r]) <= min(sigma, float(old_sv[r - 1])) + 1e-12


def test_fold_from_zero_adapter_keeps_every_direction_alive():
    _, A, B, u, v = _setup(3)
    B = torch.zeros_like(B)  # PEFT init: B = 0
    A_new, B_new, _ = fold_rank1(A, B, 1.0, u, 0.4, v)
    assert torch.allclose(B_new @ A_new, 0.4 * torch.outer(u, v), atol=1e-12)
    assert float(torch.linalg.svdvals(A_new).min()) > 1e-3  # A' full row rank: no dead LoRA slots


def test_fold_float32_close_to_intended():
    g, A, B, u, v = _setup(4)
    A32, B32 = A.float(), B.float()
    B32 = B32[:, :3] @ torch.randn(3, 4, generator=g)
    A_new, B_new, _ = fold_rank1(A32, B32, 0.5, u.float(), 0.2, v.float())
    assert A_new.dtype == torch.float32
    intended = 0.5 * B32.double() @ A32.double() + 0.2 * torch.outer(u, v)
    assert torch.allclose((0.5 * B_new @ A_new).double(), intended, atol=1e-5)


def test_fold_general_low_rank_addition():
    g, A, B, _, _ = _setup(5)
    L = torch.randn(24, 2, generator=g, dtype=F64)
    R = torch.randn(2, 20, generator=g, dtype=F64)
    target = B @ A + L @ R
    U, S, Vh = torch.linalg.svd(target)
    A_new, B_new, dropped = fold_into_lora(A, B, L, R)
    assert torch.allclose(B_new @ A_new, (U[:, :4] * S[:4]) @ Vh[:4], atol=1e-10)
    assert torch.allclose(dropped, S[4:6], rtol=1e-8)


def test_fold_rejects_rank_above_dimensions():
    A = torch.randn(6, 4, dtype=F64)
    B = torch.randn(8, 6, dtype=F64)
    with pytest.raises(ValueError, match="exceeds"):
        fold_rank1(A, B, 1.0, torch.ones(8, dtype=F64), 1.0, torch.ones(4, dtype=F64))
