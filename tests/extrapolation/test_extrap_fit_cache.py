"""The predictor fit store: a hit returns the bits a new fit would have produced; any change is a miss."""

import pytest
import torch

import rlx.extrapolation.fit_cache as fit_cache
from rlx.extrapolation import ExtrapolationConfig, build_extrapolator
from rlx.extrapolation.fit_cache import fit_key, train_or_load
from rlx.extrapolation.lora import lora_modules
from rlx.extrapolation.predictor import train_predictor

SETTINGS = dict(hidden=8, epochs=15, lr=3e-3, min_lr_ratio=0.1, weight_decay=0.01, seed=7)


def _data(seed=0, n=6, d=10):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(3)]


def _refuse_training(*args, **kwargs):
    raise AssertionError("trained although an entry was stored")


def test_a_stored_fit_is_the_fit_training_gives(tmp_path, monkeypatch):
    g, l, y = _data()
    fresh = train_predictor(g, l, y, **SETTINGS)
    first, stored = train_or_load(tmp_path, g, l, y, **SETTINGS)
    assert not stored and len(list(tmp_path.glob("*.pt"))) == 1 and not list(tmp_path.glob(".tmp-*"))
    monkeypatch.setattr(fit_cache, "train_predictor", _refuse_training)
    again, stored = train_or_load(tmp_path, g, l, y, **SETTINGS)
    assert stored
    for fit in (first, again):  # bitwise what a fit from scratch predicts
        assert torch.equal(fit.predict(g, l), fresh.predict(g, l))
        assert (fit.scale, fit.loss_first, fit.loss_last) == (fresh.scale, fresh.loss_first, fresh.loss_last)


def test_any_change_of_input_setting_or_arithmetic_is_a_miss():
    g, l, y = _data()
    key = fit_key(g, l, y, SETTINGS)
    assert fit_key(g.clone(), l.clone(), y.clone(), dict(SETTINGS)) == key  # the content, not the objects
    y2 = y.clone()
    y2[3, 4] = torch.nextafter(y2[3, 4], torch.tensor(10.0, dtype=y2.dtype))  # one ulp of one target
    assert fit_key(g, l, y2, SETTINGS) != key
    assert fit_key(g.float(), l.float(), y.float(), SETTINGS) != key  # the dtype
    assert fit_key(l, g, y, SETTINGS) != key  # global and local swapped
    for name, value in [("epochs", 16), ("lr", 3.0001e-3), ("seed", 8), ("hidden", 9)]:
        assert fit_key(g, l, y, {**SETTINGS, name: value}) != key, name
    threads = torch.get_num_threads()
    try:  # another thread count may reduce in another order: another fit
        torch.set_num_threads(threads + 1)
        assert fit_key(g, l, y, SETTINGS) != key
    finally:
        torch.set_num_threads(threads)


def test_an_unreadable_entry_is_an_error_naming_it(tmp_path):
    g, l, y = _data()
    train_or_load(tmp_path, g, l, y, **SETTINGS)
    (entry,) = tmp_path.glob("*.pt")
    entry.write_bytes(entry.read_bytes()[:100])
    with pytest.raises(RuntimeError, match=entry.name):
        train_or_load(tmp_path, g, l, y, **SETTINGS)


def _walk_and_jump(cfg, make_policy, make_optimizer, train_step, total=5):
    model = make_policy(seed=0)
    opt = make_optimizer(model)
    ext = build_extrapolator(cfg, total_steps=total)
    ext.observe(model, 0, opt)
    jump = {}
    for step in range(1, total + 1):
        train_step(model, opt, step)
        m = ext.observe(model, step, opt)
        if step in cfg.extend_at:
            jump = {k: v for k, v in m.items() if "time_s" not in k}
    return {m.name: (m.A.detach().clone(), m.B.detach().clone()) for m in lora_modules(model)}, jump


def test_runs_that_share_their_records_share_the_fit(tmp_path, make_policy, make_optimizer, train_step):
    def cfg(**kw):
        base = dict(type="next", interval=1, horizon=2, extend_at=[4], alpha=1.5, hidden=8, epochs=10, lr=3e-3)
        return ExtrapolationConfig(**{**base, **kw})

    plain, plain_jump = _walk_and_jump(cfg(), make_policy, make_optimizer, train_step)
    first, first_jump = _walk_and_jump(cfg(fit_cache=str(tmp_path)), make_policy, make_optimizer, train_step)
    second, second_jump = _walk_and_jump(cfg(fit_cache=str(tmp_path)), make_policy, make_optimizer, train_step)
    buckets = len(list(tmp_path.glob("*.pt")))
    assert buckets >= 2  # the tiny Qwen2 has several (out, in) shapes, one fit each
    assert plain_jump["extrap/predictor_fits_stored"] == first_jump["extrap/predictor_fits_stored"] == 0
    assert second_jump["extrap/predictor_fits_stored"] == buckets
    for name, (A, B) in plain.items():  # the same jump, the same adapter afterwards
        assert torch.equal(first[name][0], A) and torch.equal(second[name][0], A), name
        assert torch.equal(first[name][1], B) and torch.equal(second[name][1], B), name
    other_alpha, jump = _walk_and_jump(cfg(fit_cache=str(tmp_path), alpha=0.5), make_policy, make_optimizer, train_step)
    assert jump["extrap/predictor_fits_stored"] == buckets  # alpha acts after the fit: it reuses it
    assert any(not torch.equal(other_alpha[n][1], B) for n, (_, B) in plain.items())
