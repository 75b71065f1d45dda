"""`EnvEngine`: a rollout engine whose `generate` runs multi-turn episodes on the engine it wraps.

It keeps the engine interface (rlx.rollout.base.RolloutEngine: `generate(prompts, n, sampling, generator,
seeds)` -> RolloutBatch, rows prompt-major), so the rollout schedules (sync / stale / async), evaluation,
data-parallel sharding and every caller of `engine.generate` run episodes without knowing it: a batch's
environment tokens are `forced` (out of the loss), its `texts` are the final answers. Everything else
(sync, weights, noise target, sleep, close, `between_steps`, `version`, `tok`) is the wrapped engine's.

`metrics()` adds the episodes' counts since the last call (env/*) to the engine's own; under torchrun
(rlx.rollout.sharded.ShardedEngine) each rank's episodes are gathered first, so env/* count the whole batch.

Per-turn rewards: each episode's sum of `Step.reward` goes into the batch's `env_reward` column ([N]), which
the training loop adds to the task's rewards (rlx.train.score) before advantages are computed.
"""

from __future__ import annotations

import contextlib
import threading

from rlx.envs.driver import Budget, run_episodes
from rlx.rollout.base import RolloutBatch

_OWN = ("engine", "make_env", "budget", "_window", "_lock")
_UNCOUNTED = threading.local()  # set by `uncounted` on the thread generating episodes that env/* must not count


def episode_counts(ep) -> dict:
    """What env/* need of one episode, small and picklable (it crosses ranks): policy turns, policy and
    environment tokens, truncation, reward and the environment's info counts."""
    return {"turns": sum(t.role == "policy" for t in ep.turns),
            "policy_tokens": sum(len(t.ids) for t in ep.turns if t.role == "policy"),
            "env_tokens": sum(len(t.ids) for t in ep.turns if t.role == "env"),
            "truncated": float(ep.truncated), "reward": float(ep.reward), "info": dict(ep.info)}


def episode_metrics(episodes) -> dict:
    """env/* means over episodes (Episode objects or their `episode_counts`): turns, policy and environment
    tokens, truncation, reward, info counts."""
    if not episodes:
        return {}
    c = [e if isinstance(e, dict) else episode_counts(e) for e in episodes]
    n = len(c)
    m = {"env/episodes": n,
         "env/turns/mean": sum(e["turns"] for e in c) / n,
         "env/policy_tokens/mean": sum(e["policy_tokens"] for e in c) / n,
         "env/env_tokens/mean": sum(e["env_tokens"] for e in c) / n,
         "env/truncated_frac": sum(e["truncated"] for e in c) / n,
         "env/reward/mean": sum(e["reward"] for e in c) / n}
    for k in sorted({k for e in c for k in e["info"]}):
        m[f"env/{k}/mean"] = sum(e["info"].get(k, 0.0) for e in c) / n
    return m


def transcript(tok, batch, r: int) -> str:
    """Row r's completion with the tokens the policy did not sample (`forced`: environment replies, an
    interruption phrase) in [[...]]: what an episode looked like, where `texts` holds only its last turn."""
    L, out, run, env = int(batch.completion_mask[r].sum()), [], [], False
    for t, forced in zip(batch.completion_ids[r, :L].tolist(), batch.forced[r, :L].tolist()):
        if forced != env and run:
            out.append(f"[[{tok.decode(run)}]]" if env else tok.decode(run))
            run = []
        run.append(t)
        env = forced
    if run:
        out.append(f"[[{tok.decode(run)}]]" if env else tok.decode(run))
    return "".join(out)


class EnvEngine:
    """`engine` with multi-turn `generate`: each row an episode of `make_env()` under `budget`."""

    def __init__(self, engine, make_env, budget: Budget):
        object.__setattr__(self, "engine", engine)
        object.__setattr__(self, "make_env", make_env)
        object.__setattr__(self, "budget", budget)
        object.__setattr__(self, "_window", [])  # episodes since the last metrics()
        object.__setattr__(self, "_lock", threading.Lock())  # async: a generator thread adds, the trainer reads

    def __getattr__(self, name):
        return getattr(self.__dict__["engine"], name)

    def __setattr__(self, name, value):  # between_steps (async schedule) and the like belong to the engine
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.engine, name, value)

    def generate(self, prompts, n, sampling, generator, seeds=None) -> RolloutBatch:
        out = run_episodes(self.engine, self.make_env, list(prompts), n, sampling, generator, self.budget, seeds=seeds)
        out.batch.env_reward = out.rewards  # [N] the per-turn rewards summed: rlx.train.score adds them to the task's
        self._count(out.episodes)
        return out.batch

    @staticmethod
    @contextlib.contextmanager
    def uncounted():
        """Episodes this thread generates inside are not in env/* (the held-out evaluation's: env/* describe the
        episodes trained on, and a resumed run must log what the uninterrupted one logged)."""
        before, _UNCOUNTED.on = getattr(_UNCOUNTED, "on", False), True
        try:
            yield
        finally:
            _UNCOUNTED.on = before  # a nested use leaves the outer one in force

    def _count(self, episodes: list) -> None:
        if not getattr(_UNCOUNTED, "on", False):
            with self._lock:
                self._window.extend(episodes)

    gathers_metrics = True  # rlx.rollout.sharded.ShardedEngine passes its gather to `metrics`

    def metrics(self, gather=None) -> dict:
        """The engine's metrics and env/* over the episodes since the last call; `gather` (every rank's list,
        in rank order: a collective, so every rank calls it) makes env/* count all ranks' episodes."""
        with self._lock:
            episodes, self._window[:] = list(self._window), []
        counts = [episode_counts(ep) for ep in episodes]
        if gather is not None:
            counts = [c for part in gather(counts) for c in part]
        return {**self.engine.metrics(), **episode_metrics(counts)}
