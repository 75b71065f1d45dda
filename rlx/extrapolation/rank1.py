"""Top singular triplet of a LoRA delta from the factors, never the full matrix: delta = scaling * L R with
L = [B, B0], R = [A; -A0]; QR of L and R^T reduce it to a k x k SVD (docs/extrapolation.md, Records)."""

import torch

Triplet = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (u [out], s [], v [in])


def work_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def canonical_sign(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip (u, v) -> (-u, -v) so that the largest-|.| entry of u is positive (u v^T unchanged)."""
    flip = u[u.abs().argmax()] < 0
    return (-u, -v) if flip else (u, v)


def align_sign(triplet: Triplet, reference: Triplet) -> Triplet:
    """Flip (u, v) -> (-u, -v) when u . u_ref + v . v_ref < 0 (both sides vote, so the choice is
    continuous in the vectors; kept as is on an exact tie). The matrix s u v^T is unchanged."""
    u, s, v = triplet
    ru, _, rv = reference
    agreement = torch.dot(u, ru.to(u)) + torch.dot(v, rv.to(v))
    return (-u, s, -v) if agreement < 0 else (u, s, v)


def lowrank_svd(L: torch.Tensor, R: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD of L @ R (L [out, k], R [k, in]) without forming it: P [out, m], S [m] descending, Q [in, m] with
    L @ R = P diag(S) Q^T, m = min(out, in, k)."""
    Q1, R1 = torch.linalg.qr(L)  # [out, k1], [k1, k]
    Q2, R2 = torch.linalg.qr(R.T)  # [in, k2], [k2, k]
    U, S, Vh = torch.linalg.svd(R1 @ R2.T, full_matrices=False)  # [k1, m], [m], [m, k2]
    return Q1 @ U, S, Q2 @ Vh.T


def rank1_from_lora(A: torch.Tensor, B: torch.Tensor, scaling: float, A0: torch.Tensor | None = None,
                    B0: torch.Tensor | None = None) -> Triplet:
    """(u [out], s [], v [in]): top singular triplet of scaling * (B A - B0 A0), sign canonical; A [r, in], B [out, r],
    A0 / B0 (both or neither, any rank). In float32 (float64 for float64 A); unit u and v, s >= 0."""
    if (A0 is None) != (B0 is None):
        raise ValueError("rank1_from_lora: pass both A0 and B0, or neither")
    if A.ndim != 2 or B.ndim != 2 or A.shape[0] != B.shape[1]:
        raise ValueError(f"rank1_from_lora: bad factor shapes A {tuple(A.shape)}, B {tuple(B.shape)}")
    dt = work_dtype(A)
    L, R = B.to(dt), A.to(dt)
    if A0 is not None:
        if A0.shape[1] != A.shape[1] or B0.shape[0] != B.shape[0] or A0.shape[0] != B0.shape[1]:
            raise ValueError(f"rank1_from_lora: reference factors A0 {tuple(A0.shape)}, B0 {tuple(B0.shape)} do not match")
        L = torch.cat([L, B0.to(device=L.device, dtype=dt)], dim=1)  # [out, r + r0]
        R = torch.cat([R, -A0.to(device=R.device, dtype=dt)], dim=0)  # [r + r0, in]
    P, S, Q = lowrank_svd(L, R)
    s = S[0] * abs(scaling)
    # Copies, not column views: a view keeps all of P and Q ([out, r + r0], [in, r + r0]) alive in every
    # record that holds it, in memory and in each checkpoint (torch.save writes a view's whole storage).
    u, v = P[:, 0].clone(), Q[:, 0].clone()
    if scaling < 0:
        u = -u
    u, v = canonical_sign(u, v)
    return u, s, v
