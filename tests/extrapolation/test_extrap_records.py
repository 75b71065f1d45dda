"""Trajectory records against dense SVDs of the formed deltas, including across a jump."""

import contextlib

import torch

from rlx.extrapolation.lora import lora_modules, snapshot
from rlx.extrapolation.records import TrajectoryRecords

F64 = torch.float64
SCALING = 0.5


def _no_timer(key):
    return contextlib.nullcontext()


def _dense(model) -> dict[str, torch.Tensor]:
    return {m.name: SCALING * m.B.detach() @ m.A.detach() for m in lora_modules(model)}


@torch.no_grad()
def _walk(model, g, size=0.05):
    for m in lora_modules(model):
        m.A.add_(size * torch.randn(m.A.shape, generator=g, dtype=F64))
        m.B.add_(size * torch.randn(m.B.shape, generator=g, dtype=F64))


def _top1(delta: torch.Tensor) -> torch.Tensor:
    U, S, Vh = torch.linalg.svd(delta)
    return S[0] * torch.outer(U[:, 0], Vh[0])


def _matrix(triplet) -> torch.Tensor:
    u, s, v = triplet
    return s * torch.outer(u, v)


def _agree(a, b) -> float:
    return float(torch.dot(a[0], b[0]) + torch.dot(a[2], b[2]))


def test_records_match_dense_svd_and_survive_a_jump(fake_lora_model):
    model = fake_lora_model([(10, 7), (7, 10)], r=3, scaling=SCALING, dtype=F64)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in lora_modules(model):
            m.A.copy_(torch.randn(m.A.shape, generator=g, dtype=F64))
            m.B.zero_()  # PEFT init
    mods = lora_modules(model)
    rec = TrajectoryRecords(interval=2, horizon=4)
    rec.start(mods, snapshot(mods))
    dense = {0: _dense(model)}
    jump_at = 6
    for step in range(1, 13):
        _walk(model, g)
        if step % 2:
            continue
        rec.record(step, mods, _no_timer)
        dense[step] = _dense(model)
        if step == jump_at:  # a jump that is no RL motion
            with torch.no_grad():
                for m in mods:
                    m.B.add_(torch.randn(m.B.shape, generator=g, dtype=F64))
            rec.after_jump(step, mods, _no_timer)
            dense["post"] = _dense(model)
    W = lambda t: dense["post"] if t == jump_at else dense[t]  # noqa: E731  W_t as later records see it

    for name in dense[0]:
        for t in range(2, 13, 2):
            entry = rec.records[t][name]
            assert torch.allclose(_matrix(entry["global"]), _top1(W(t)[name] - dense[0][name]), atol=1e-10)
            local_from = dense[t - 2] if t - 2 != jump_at else dense["post"]
            pre_jump_now = dense[t][name]  # the local delta of the jump record is the RL motion before it
            assert torch.allclose(_matrix(entry["local"]), _top1(pre_jump_now - local_from[name]), atol=1e-10)
            # sign conventions: global follows the previous global, local follows global
            if t > 2:
                assert _agree(entry["global"], rec.records[t - 2][name]["global"]) >= 0
            assert _agree(entry["local"], entry["global"]) >= 0
        # targets: W_{t+4} - W_t, never across the jump at 6
        assert rec.pairs() == [0, 2, 6, 8]
        for t in rec.pairs():
            target = rec.targets[t][name]
            assert torch.allclose(_matrix(target), _top1(dense[t + 4][name] - W(t)[name]), atol=1e-10)
            reference = rec.records[t][name]["local"] if t > 0 else None
            if reference is not None:
                assert _agree(target, reference) >= 0
    # only the snapshots a future local / target delta needs are kept
    assert sorted(rec.window) == [10, 12]


def test_records_state_dict_is_a_snapshot(fake_lora_model):
    model = fake_lora_model([(6, 5)], r=2, scaling=SCALING, dtype=F64)
    mods = lora_modules(model)
    rec = TrajectoryRecords(interval=1, horizon=2)
    rec.start(mods, snapshot(mods))
    g = torch.Generator().manual_seed(1)
    _walk(model, g)
    rec.record(1, mods, _no_timer)
    sd = rec.state_dict()
    saved_global = [t.clone() for t in sd["records"][1]["m0"]["global"]]
    other = TrajectoryRecords(interval=1, horizon=2)
    other.load_state_dict(sd)
    _walk(model, g, size=1.0)
    rec.after_jump(1, mods, _no_timer)  # rewrites the live record's global triplet and window
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a, b))  # noqa: E731
    assert not same(rec.records[1]["m0"]["global"], saved_global)
    assert same(sd["records"][1]["m0"]["global"], saved_global) and same(other.records[1]["m0"]["global"], saved_global)
    assert not torch.equal(rec.window[1]["m0"][1], other.window[1]["m0"][1])


def test_saved_records_hold_only_their_own_bytes(fake_lora_model, tmp_path):
    # A triplet's u and v are the first columns of the thin SVD's P [out, r + r0] and Q [in, r + r0]. Kept as
    # views, every record would hold the whole of P and Q, and torch.save writes a view's whole storage:
    # on SmolLM2 (r 16) a 7-step NExt checkpoint held 228 MB of record storage for 59 MB of records.
    model = fake_lora_model([(48, 40), (40, 48)], r=4, scaling=SCALING, dtype=F64)
    mods = lora_modules(model)
    rec = TrajectoryRecords(interval=1, horizon=2)
    rec.start(mods, snapshot(mods))
    g = torch.Generator().manual_seed(2)
    for step in (1, 2, 3):
        _walk(model, g)
        rec.record(step, mods, _no_timer)

    def tensors(o):
        if isinstance(o, torch.Tensor):
            yield o
        elif isinstance(o, dict):
            for x in o.values():
                yield from tensors(x)
        elif isinstance(o, (list, tuple)):
            for x in o:
                yield from tensors(x)

    sd = rec.state_dict()
    triplets = [t for part in ("records", "targets") for t in tensors(sd[part])]
    own = sum(t.numel() * t.element_size() for t in triplets)
    assert triplets and sum(t.untyped_storage().nbytes() for t in triplets) == own
    torch.save(sd, tmp_path / "records.pt")
    # the file: the triplets' bytes, the window's snapshots and W_0, and pickle framing (a few KB here)
    window = sum(t.numel() * t.element_size() for part in ("initial", "window") for t in tensors(sd[part]))
    assert (tmp_path / "records.pt").stat().st_size < own + window + 64_000
