"""`EnvEngine`: a rollout engine whose `generate` runs multi-turn episodes on the engine it wraps.

It keeps the engine interface (rlx.rollout.base.RolloutEngine: `generate(prompts, n, sampling, generator,
seeds)` -> RolloutBatch, rows prompt-major), so the rollout schedules (sync / stale / async), evaluation,
data-parallel sharding and every caller of `engine.generate` run episodes without knowing it: a batch's
environment tokens are `forced` (out of the loss), its `texts` are the final answers. Everything else
(sync, weights, noise target, sleep, close, `between_steps`, `version`, `tok`) is the wrapped engine's.

`metrics()` adds the episodes' counts since the last call (env/*) to the engine's own.

Per-turn rewards: each episode's sum of `Step.reward` goes into the batch's `env_reward` column ([N]), which
the training loop adds to the task's rewards (rlx.train.score) before advantages are computed.
"""

from __future__ import annotations

import threading

from rlx.envs.driver import Budget, run_episodes
from rlx.rollout.base import RolloutBatch

_OWN = ("engine", "make_env", "budget", "_window", "_lock")


def episode_metrics(episodes) -> dict:
    """env/* means over episodes: turns, policy and environment tokens, truncation, reward, info counts."""
    if not episodes:
        return {}
    n = len(episodes)
    pol = [sum(len(t.ids) for t in ep.turns if t.role == "policy") for ep in episodes]
    env = [sum(len(t.ids) for t in ep.turns if t.role == "env") for ep in episodes]
    m = {"env/episodes": n,
         "env/turns/mean": sum(sum(t.role == "policy" for t in ep.turns) for ep in episodes) / n,
         "env/policy_tokens/mean": sum(pol) / n, "env/env_tokens/mean": sum(env) / n,
         "env/truncated_frac": sum(ep.truncated for ep in episodes) / n,
         "env/reward/mean": sum(ep.reward for ep in episodes) / n}
    for k in sorted({k for ep in episodes for k in ep.info}):
        m[f"env/{k}/mean"] = sum(ep.info.get(k, 0.0) for ep in episodes) / n
    return m


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
        with self._lock:
            self._window.extend(out.episodes)
        return out.batch

    def metrics(self) -> dict:
        with self._lock:
            episodes, self._window[:] = list(self._window), []
        return {**self.engine.metrics(), **episode_metrics(episodes)}
