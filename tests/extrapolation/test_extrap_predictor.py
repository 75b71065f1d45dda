"""The NExt predictor on a synthetic smooth LoRA trajectory, end to end through the records."""

import pytest
import torch

from rlx.extrapolation import ExtrapolationConfig
from rlx.extrapolation.predictor import decode_triplet, encode_triplet, train_predictor
from benchmarks.studies.next_trajectory import SmoothTrajectory, evaluate

F64 = torch.float64


def test_predictor_fits_smooth_trajectory_and_beats_repeating_the_last_local_delta():
    cfg = ExtrapolationConfig(type="next", interval=10, horizon=50, extend_at=[150], alpha=1.0,
                              hidden=32, epochs=300, lr=1e-2, weight_decay=0.0)  # fmt: skip
    traj = SmoothTrajectory()
    res = evaluate(cfg, traj)
    assert res["pairs"] == 11  # records 0, 10, ..., 100 have a target by step 150
    assert res["modules_checked"] == 9
    # the fit: L1 loss falls far below its initial value
    assert res["loss_last"] < 0.1 * res["loss_first"]
    # held-out point: the jump at step 150 comes from the record at 150, whose target was never
    # a training pair; truth is the analytic W(200) - W(150)
    assert res["repeat_local_rel_error"] > 0.25  # the baseline is genuinely wrong here
    assert res["jump_rel_error"] < 0.6 * res["repeat_local_rel_error"], res
    # independent check of one module's jump against the analytic trajectory
    i = traj.covered(150, 50)[-1]
    truth = traj.dense(200, i) - traj.dense(150, i)
    jump = traj.adapter_delta(i) - traj.dense(150, i)
    assert torch.linalg.norm(jump - truth) < 0.5 * torch.linalg.norm(truth)


def test_encode_decode_round_trip_is_the_same_rank1_matrix():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(5, generator=g, dtype=F64)
    v = torch.randn(3, generator=g, dtype=F64)
    u, v = u / u.norm(), v / v.norm()
    s = torch.tensor(2.5, dtype=F64)
    x = encode_triplet((u, s, v))
    assert x.shape == (8,)
    du, ds, dv = decode_triplet(x, 5)
    assert torch.allclose(ds * torch.outer(du, dv), s * torch.outer(u, v))
    # a predicted vector (norms of the two parts need not match) decodes to the matrix a b^T
    a, b = torch.randn(5, generator=g, dtype=F64), torch.randn(3, generator=g, dtype=F64)
    du, ds, dv = decode_triplet(torch.cat([a, b]), 5)
    assert torch.allclose(ds * torch.outer(du, dv), torch.outer(a, b))


def test_train_predictor_is_seeded_and_leaves_global_rng_alone():
    g = torch.Generator().manual_seed(1)
    x, y, z = (torch.randn(6, 10, generator=g) for _ in range(3))
    kw = dict(hidden=8, epochs=5, lr=1e-3, min_lr_ratio=0.1, weight_decay=0.01)
    rng = torch.get_rng_state()
    f1 = train_predictor(x, y, z, seed=3, **kw)
    assert torch.equal(rng, torch.get_rng_state())
    f2 = train_predictor(x, y, z, seed=3, **kw)
    f3 = train_predictor(x, y, z, seed=4, **kw)
    for (k, p1), p2, p3 in zip(f1.net.state_dict().items(), f2.net.state_dict().values(), f3.net.state_dict().values()):
        assert torch.equal(p1, p2), k
    assert any(not torch.equal(p1, p3) for p1, p3 in zip(f1.net.state_dict().values(), f3.net.state_dict().values()))
    with pytest.raises(ValueError, match="non-empty"):
        train_predictor(x[:0], y[:0], z[:0], seed=0, **kw)
