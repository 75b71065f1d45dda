"""Fold a low-rank jump into the LoRA factors, keeping rank r (docs/extrapolation.md, Predict-extend).

A packed base cannot absorb dW, so B A + L_e R_e is re-factorized to its best rank-r approximation P diag(S) Q^T;
the gauge H = A Q (singular values floored at `gauge_floor` * RMS of A's) moves A as little as it can."""

import torch

from rlx.extrapolation.rank1 import lowrank_svd, work_dtype

GAUGE_FLOOR = 0.1


def fold_into_lora(A: torch.Tensor, B: torch.Tensor, L_extra: torch.Tensor, R_extra: torch.Tensor,
                   gauge_floor: float = GAUGE_FLOOR) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(A' [r, in], B' [out, r], dropped [m - r]): rank-r factors of B A + L_extra R_extra (L_extra [out, k], R_extra
    [k, in], in factor units: W-space jumps / `scaling`) in the work dtype, and the discarded singular values
    (||error||_F = ||dropped||_2)."""
    r, n_in = A.shape
    n_out = B.shape[0]
    if min(n_in, n_out) < r:
        raise ValueError(f"fold_into_lora: rank {r} exceeds the layer dimensions ({n_out}, {n_in})")
    if L_extra.shape[0] != n_out or R_extra.shape[1] != n_in or L_extra.shape[1] != R_extra.shape[0]:
        raise ValueError(f"fold_into_lora: extra factors {tuple(L_extra.shape)}, {tuple(R_extra.shape)} do not fit "
                         f"({n_out}, {n_in})")
    dt = work_dtype(A)
    A_, B_ = A.to(dt), B.to(dt)
    L = torch.cat([B_, L_extra.to(device=B_.device, dtype=dt)], dim=1)  # [out, r + k]
    R = torch.cat([A_, R_extra.to(device=A_.device, dtype=dt)], dim=0)  # [r + k, in]
    P, S, Q = lowrank_svd(L, R)  # [out, m], [m], [in, m]; m >= r since min(out, in) >= r
    P, S, Q, dropped = P[:, :r], S[:r], Q[:, :r], S[r:]

    H = A_ @ Q  # [r, r]
    Uh, Sh, Vh = torch.linalg.svd(H)
    rms_sv = torch.linalg.norm(A_) / r**0.5
    floor = gauge_floor * rms_sv if rms_sv > 0 else torch.ones((), dtype=dt, device=A_.device) / n_in**0.5
    Sh = torch.clamp(Sh, min=floor)
    A_new = (Uh * Sh) @ Vh @ Q.T  # [r, in]
    B_new = (P * S) @ (Vh.T / Sh) @ Uh.T  # [out, r]; H_reg^-1 = Vh^T diag(1/Sh) Uh^T
    return A_new, B_new, dropped


def fold_rank1(A: torch.Tensor, B: torch.Tensor, scaling: float, u: torch.Tensor, sigma: torch.Tensor | float,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Factors for scaling * B' A' ~= scaling * B A + sigma * u v^T (u [out], v [in], W units)."""
    dt = work_dtype(A)
    L_extra = (u.to(dt) * (sigma / scaling))[:, None]  # [out, 1]
    R_extra = v.to(dt)[None, :]  # [1, in]
    return fold_into_lora(A, B, L_extra, R_extra)
