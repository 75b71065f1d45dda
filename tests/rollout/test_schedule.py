"""rollout.mode: sync / stale / async schedules, unit-level (a scripted engine) and through the real loop."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from rlx.rollout.schedule import AsyncSchedule, StaleSchedule
from tests.conftest import compose, read_metrics, run_tiny, strip_timing

# a base that gets non-zero rewards from step 1 (so every update moves the policy)
EASY = ["task.num_terms=2", "task.max_operand=6", "task.n_train=60", "task.n_eval=12", "model.sft.steps=200"]


class ScriptedEngine(RolloutEngine):
    """Rows of T tokens; token t carries the engine's version at decode step t (between_steps runs first)."""

    def __init__(self, T: int = 4, delay: float = 0.0):
        self.T, self.delay, self.version, self.loaded = T, delay, 0, []
        self.tok = SimpleNamespace(pad_token_id=0)

    def export_weights(self, policy):
        return {"w": policy}

    def load_weights(self, payload, version):
        self.loaded.append(version)
        self.version = version

    def noise_target(self):
        return None

    def generate(self, prompts, n, sampling, generator):
        N, vers = len(prompts) * n, []
        for t in range(self.T):
            if t and self.between_steps is not None:
                self.between_steps()
            vers.append(self.version)
            time.sleep(self.delay)
        tv = torch.tensor(vers).expand(N, -1).clone()
        ones = torch.ones(N, self.T, dtype=torch.long)
        return RolloutBatch(ones, ones, ones, ones, torch.zeros(N, self.T), torch.zeros(N, dtype=torch.bool),
                            torch.arange(len(prompts)).repeat_interleave(n), ["x"] * N, None,
                            version=tv[:, 0].clone(), token_version=tv)


class CountingTask:
    def __init__(self):
        self.i = 0

    def sample(self, n, skip=None):
        out = [self.example_at(self.i + j) for j in range(n)]
        self.i += n
        return out

    def example_at(self, i):
        return SimpleNamespace(prompt=str(i), key=i, index=i)


def _async(k, B=2, delay=0.0, **kw):
    sp = SamplingParams(max_tokens=4)
    return AsyncSchedule(ScriptedEngine(delay=delay), CountingTask(), 2, sp, torch.Generator(), k=k, prompts_per_step=B,
                         **kw)


@pytest.mark.parametrize("k", [1, 3])
def test_async_staleness_never_exceeds_k_with_a_slow_trainer(k):
    s = _async(k, delay=0.001)
    try:
        for step in range(1, 13):
            m = {}
            ex, b = s.generate(None, 2, step, metrics=m)
            lag = (step - 1) - b.version
            assert len(ex) == 2 and len(b) == 4 and sorted(b.group.unique().tolist()) == [0, 1]
            assert int(lag.max()) <= k and int(lag.min()) >= 0, (step, lag)
            time.sleep(0.02)  # the trainer is slower than the generator: the queue fills up to k batches
            s.push(step, step)
        assert m["rollout/queue_groups"] <= 2 * k
    finally:
        s.close()
    assert not s.thread.is_alive()


def test_async_drops_groups_beyond_the_bound_and_counts_them():
    s = _async(1)
    try:
        s.generate(None, 2, 1)
        deadline = time.time() + 5
        while len(s.queue) < 2 and time.time() < deadline:  # the generator fills its one batch of room
            time.sleep(0.01)
        for v in range(1, 5):  # four updates without consuming: what is queued is now 4 versions old
            s.push(v, v)
        m = {}
        ex, b = s.generate(None, 2, 5, metrics=m)
        assert m["rollout/dropped_stale_groups"] == 2 and m["rollout/dropped_stale_tokens"] == 2 * 2 * 4
        assert m["rollout/dropped_stale_length/mean"] == 4.0  # 16 tokens over the 4 dropped rows
        assert m["rollout/drop_rate"] == 2 / 6  # since the last report (none at step 1): 2 dropped, 2 + 2 taken
        assert int((4 - b.version).max()) <= 1
        assert [e.index for e in ex] == [2, 3]  # the dropped prompts 2, 3 are generated again
    finally:
        s.close()


def test_async_pace_holds_k_batches_and_drop_runs_ahead_to_queue_batches():
    """pace: the generator stops at k batches queued (AReaL's bound); drop: at queue_batches (0 = 2k)."""
    for kw, groups in (({}, 2 * 2), ({"policy": "drop"}, 2 * 2 * 2), ({"policy": "drop", "queue_batches": 3}, 2 * 3)):
        s = _async(2, **kw)
        try:
            s.generate(None, 2, 1)
            deadline = time.time() + 10
            while len(s.queue) < groups and time.time() < deadline:  # the generator fills its room ...
                time.sleep(0.01)
            time.sleep(0.2)  # ... then waits
            with s.cond:
                assert len(s.queue) == groups, kw
        finally:
            s.close()


@pytest.mark.parametrize("policy", ["pace", "drop"])
def test_async_checkpoint_keeps_the_prompts_not_yet_trained_on(policy):
    """state_dict (taken paused) lists the queued prompts; a resumed schedule generates them first."""
    s = _async(1, policy=policy)
    try:
        s.generate(None, 2, 1)  # prompts 0, 1 trained on; the generator queues 2, 3 (and more under drop)
        deadline = time.time() + 10
        while len(s.queue) < 2 and time.time() < deadline:
            time.sleep(0.01)
        with s.paused():
            state, drawn = s.state_dict(), s.task.i
    finally:
        s.close()
    assert state["redo"] == list(range(2, drawn))
    r = _async(1, policy=policy)
    r.task.i = drawn  # the task's position, as the checkpoint restores it
    r.load_state_dict(state)
    try:
        ex, _ = r.generate(None, 2, 2)
    finally:
        r.close()
    assert [e.index for e in ex] == [2, 3]


def test_async_inflight_update_reaches_the_sequence_in_progress():
    s = _async(2, delay=0.05)
    try:
        s.generate(None, 2, 1)
        s.push(1, 1)  # while the generator is decoding its next chunk
        time.sleep(0.5)
        ex, b = s.generate(None, 2, 2)
        ex, b = s.generate(None, 2, 3)
    finally:
        s.close()
    assert 1 in s.engine.loaded
    rows = [set(r.tolist()) for r in b.token_version]
    assert all(r <= {0, 1} for r in rows)


def test_async_generator_error_reaches_the_trainer():
    s = _async(1)
    s.engine.generate = lambda *a, **k: (_ for _ in ()).throw(ValueError("engine broke"))
    try:
        with pytest.raises(RuntimeError, match="generator thread failed") as e:
            s.generate(None, 2, 1)
        assert "engine broke" in str(e.value.__cause__)
    finally:
        s.close()


def test_stale_schedule_samples_the_snapshot_of_k_updates_ago():
    """The engine is synced to version max(0, step - 1 - k) with those weights in the policy."""
    policy = torch.nn.Linear(2, 2)
    seen = []

    class Recording(ScriptedEngine):
        def export_weights(self, pol):
            return pol.weight.detach().clone()

        def generate(self, prompts, n, sampling, generator):
            seen.append((self.version, policy.weight.detach().clone()))
            return super().generate(prompts, n, sampling, generator)

    s = StaleSchedule(Recording(), CountingTask(), 2, SamplingParams(max_tokens=4), torch.Generator(), k=2)
    weights = {0: policy.weight.detach().clone()}
    for step in range(1, 7):
        s.generate(policy, 2, step)
        with torch.no_grad():
            policy.weight.add_(1.0)  # the update of this step
        weights[step] = policy.weight.detach().clone()
        s.push(policy, step)
    assert [v for v, _ in seen] == [0, 0, 0, 1, 2, 3]
    for v, w in seen:
        assert torch.equal(w, weights[v])  # the policy held version v's weights while the engine sampled
    assert torch.equal(policy.weight, weights[6])  # and got its current weights back
    assert sorted(s.state_dict()["snapshots"]) == [4, 5, 6]


def test_mode_and_staleness_are_checked_before_building():
    from rlx.train import check

    for over, match in [(["rollout.mode=later"], "rollout.mode"), (["rollout.max_staleness=-1"], "max_staleness"),
                        (["rollout.mode=async", "rollout.max_staleness=0"], "max_staleness >= 1"),
                        (["rollout.interrupt.enabled=true", "rollout.interrupt.answer_tokens=0"], "answer_tokens")]:
        with pytest.raises(ValueError, match=match):
            check(compose(over))


# ---------------------------------------------------------------- the real loop


@pytest.mark.integration
def test_stale_mode_lags_exactly_k_and_is_bit_reproducible(tmp_path):
    over = EASY + ["rollout.mode=stale", "rollout.max_staleness=2", "train.steps=5"]
    run_tiny(tmp_path / "a", over)
    run_tiny(tmp_path / "b", over)
    a, b = strip_timing(read_metrics(tmp_path / "a")), strip_timing(read_metrics(tmp_path / "b"))
    assert a == b
    assert [r["rollout/staleness/max"] for r in a[1:]] == [0, 1, 2, 2, 2]
    assert all(r["actor/grad_norm"] > 0 for r in a[1:])
    assert a[1]["rollout/logprob_diff/mean"] < 1e-5  # step 1 samples version 0, which it then updates
    assert all(r["rollout/logprob_diff/mean"] > 1e-3 for r in a[2:])  # behaviour != the policy being updated
    sync = strip_timing(read_metrics(_run(tmp_path / "s", EASY + ["train.steps=5"])))
    zero = strip_timing(read_metrics(_run(tmp_path / "z", EASY + ["train.steps=5", "rollout.mode=stale"])))
    assert zero == sync and sync[2] != a[2]  # k = 0 is on-policy


def _run(d, over):
    run_tiny(d, over)
    return d
