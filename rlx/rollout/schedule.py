"""How the loop gets its groups from an engine: the schedules of `rollout.mode` (docs/offpolicy.md): sync; stale (k
updates ago, deterministic); async (PipelineRL-k: a generator thread with in-flight weight updates, no group over k
versions old reaching the loss). AQN noise is on the engine's weights for the generation only (QeRL)."""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager, nullcontext

import torch

from rlx.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from rlx.models.trainable import load_trainable, trainable_state
from rlx.rollout.interrupt import interrupt_and_answer, phrase_ids


def generate_groups(engine: RolloutEngine, task, n_prompts: int, group_size: int, sampling: SamplingParams,
                    generator: torch.Generator, *, noise=None, step: int = 0, skip=None,
                    metrics: dict | None = None, interrupt: tuple | None = None,
                    first: list | None = None) -> tuple[list, RolloutBatch]:
    """n_prompts -> group_size completions each; `interrupt`: (phrase ids, answer tokens); `first`: to redo first."""
    examples = list(first or [])[:n_prompts]
    examples += task.sample(n_prompts - len(examples), skip=skip)
    noisy = noise.applied(engine.noise_target(), step) if noise is not None else nullcontext({})
    with noisy as noise_metrics:
        batch = engine.generate([e.prompt for e in examples], group_size, sampling, generator)
        if interrupt is not None:
            batch = interrupt_and_answer(engine, batch, sampling, generator, *interrupt)
    if metrics is not None:
        metrics.update(noise_metrics)
    return examples, batch


def keep_last(snapshots: dict[int, dict], version: int, policy, k: int) -> None:
    """Record `policy`'s trainable tensors as `version` and forget versions older than version - k."""
    snapshots[version] = trainable_state(policy)
    for old in [v for v in snapshots if v < version - k]:
        del snapshots[old]


class SyncSchedule:
    """On-policy: the engine holds the weights of the last update."""

    def __init__(self, engine, task, group_size: int, sampling: SamplingParams, generator: torch.Generator,
                 noise=None, interrupt: tuple | None = None):
        self.engine, self.task, self.G = engine, task, group_size
        self.sampling, self.gen, self.noise, self.interrupt = sampling, generator, noise, interrupt

    def _generate(self, n: int, step: int, skip, metrics, first=None):
        return generate_groups(self.engine, self.task, n, self.G, self.sampling, self.gen, noise=self.noise,
                               step=step, skip=skip, metrics=metrics, interrupt=self.interrupt, first=first)

    def generate(self, policy, n: int, step: int, skip=None, metrics: dict | None = None):
        """n prompts x G completions for training step `step` -> (examples, batch)."""
        return self._generate(n, step, skip, metrics)

    def push(self, policy, version: int) -> None:
        """After an optimizer step (and any NExt jump): the trainer's policy is now `version`."""
        self.engine.sync(policy, version)

    @contextmanager
    def serving(self, policy, version: int):
        """The engine, holding the trainer's current weights, alone (evaluation)."""
        yield self.engine

    @contextmanager
    def paused(self):
        """Nothing generates inside (a consistent checkpoint of the task and RNG streams)."""
        yield

    def versions(self) -> dict[int, dict]:
        """Trainable tensors of the past versions this schedule may still sample from (none: on-policy)."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def close(self) -> None:
        pass


class StaleSchedule(SyncSchedule):
    """Generate with the policy of exactly k updates ago (deterministic off-policy data)."""

    def __init__(self, *args, k: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.k = k
        self.snapshots: dict[int, dict] = {}  # version -> trainable tensors (the last k + 1 versions)

    def generate(self, policy, n, step, skip=None, metrics=None):
        if not self.snapshots:  # a fresh run: the first version is the policy as built (or resumed)
            self.snapshots[step - 1] = trainable_state(policy)
        v = max(min(self.snapshots), step - 1 - self.k)
        if v == step - 1:
            if self.engine.version != v:
                self.engine.sync(policy, v)
            return self._generate(n, step, skip, metrics)
        current = trainable_state(policy)
        try:  # the old weights stay in the policy until the engine has sampled (the hf engine samples the module)
            load_trainable(policy, self.snapshots[v])
            self.engine.sync(policy, v)
            return self._generate(n, step, skip, metrics)
        finally:
            load_trainable(policy, current)

    def push(self, policy, version):  # no engine sync: the next generation loads the version it needs
        keep_last(self.snapshots, version, policy, self.k)

    def versions(self):
        return self.snapshots

    @contextmanager
    def serving(self, policy, version):
        if self.engine.version != version:
            self.engine.sync(policy, version)
        yield self.engine

    def state_dict(self):
        return {"snapshots": {v: {n: t.cpu() for n, t in s.items()} for v, s in self.snapshots.items()}}

    def load_state_dict(self, state):
        self.snapshots = {int(v): s for v, s in state["snapshots"].items()}


def _window() -> dict:
    """What the async schedule counts between two reports (a step's metrics, refills included)."""
    return {"gen_idle": 0.0, "trainer_wait": 0.0, "dropped": 0, "dropped_tokens": 0, "dropped_rows": 0,
            "taken": 0, "taken_tokens": 0, "taken_rows": 0}


class AsyncSchedule(SyncSchedule):
    """PipelineRL-k: a generator thread, a bounded queue of groups, in-flight weight updates."""

    def __init__(self, *args, k: int, prompts_per_step: int, keep_versions: bool = False, policy: str = "pace",
                 queue_batches: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.k, self.chunk = k, prompts_per_step
        self.keep_versions, self.snapshots = keep_versions, {}  # algo.mismatch_split_every: the last k + 1 versions
        # groups queued + in flight: pace holds k batches, so a group is trained on within k versions
        self.capacity = prompts_per_step * (k if policy == "pace" else (queue_batches or 2 * k))
        self.queue: deque = deque()  # (example, RolloutBatch of G rows)
        self.redo: deque = deque()  # stream indices to generate before the task's next prompts
        self.cond = threading.Condition()
        self.engine_lock = threading.Lock()  # held by whoever drives the engine
        self.pending = None  # (payload, version) waiting for the generator
        self.trainer_version, self.skip, self.in_flight = 0, None, 0
        self.error: BaseException | None = None
        self.stop = self.started = False
        self.stats = _window()
        self.engine.between_steps = self._apply_pending
        self.thread = threading.Thread(target=self._loop, name="rlx-generator", daemon=True)

    def _apply_pending(self) -> None:
        with self.cond:
            pending, self.pending = self.pending, None
        if pending is None:
            return
        step = self.noise.active_step if self.noise is not None else None
        if step is not None:  # vLLM's reload replaces every weight, norms included: noise goes back on after
            self.noise.restore()
        self.engine.load_weights(*pending)
        if step is not None:
            self.noise.apply(self.engine.noise_target(), step)

    def _again(self) -> list:
        """Up to a chunk of the prompts to generate again (a retired one is left out)."""
        with self.cond:
            idx = [self.redo.popleft() for _ in range(min(self.chunk, len(self.redo)))]
        examples = [self.task.example_at(i) for i in idx]
        return [e for e in examples if self.skip is None or not self.skip(e.key)]

    def _loop(self) -> None:
        try:
            while True:
                t0 = time.time()
                with self.cond:
                    while not self.stop and len(self.queue) + self.in_flight + self.chunk > self.capacity:
                        self.cond.wait()
                    if self.stop:
                        return
                    self.in_flight = self.chunk
                    self.stats["gen_idle"] += time.time() - t0
                with self.engine_lock:  # a checkpoint (paused) sees the chunk either not drawn or queued
                    self._apply_pending()
                    examples, batch = self._generate(self.chunk, self.trainer_version + 1, self.skip, None,
                                                     first=self._again())
                    groups = [(e, batch.select(batch.group == i)) for i, e in enumerate(examples)]
                    with self.cond:
                        self.queue.extend(groups)
                        self.in_flight = 0
                        self.cond.notify_all()
        except BaseException as e:  # the trainer re-raises it
            with self.cond:
                self.error = e
                self.in_flight = 0
                self.cond.notify_all()

    def _take(self, n: int, step: int) -> list:
        """n groups no more than k versions old; the stale ones before them are dropped (under cond)."""
        taken: list = []
        while len(taken) < n:
            while self.queue and (step - 1) - int(self.queue[0][1].version.min()) > self.k:
                ex, old = self.queue.popleft()  # too stale for the bound: never reaches the loss
                self.redo.append(ex.index)  # its prompt is generated again
                self._count("dropped", old)
            if self.queue:
                taken.append(self.queue.popleft())
                self._count("taken", taken[-1][1])
                self.cond.notify_all()
                continue
            if self.error is not None:
                raise RuntimeError("rollout generator thread failed") from self.error
            self.cond.wait()
        return taken

    def _count(self, what: str, batch) -> None:
        self.stats[what] += 1
        self.stats[f"{what}_tokens"] += int(batch.completion_mask.sum())
        self.stats[f"{what}_rows"] += len(batch)

    def _report(self, metrics: dict) -> None:
        """The window's counts since the last report (refills included), then a new window."""
        st = self.stats
        metrics.update({"timing_s/gen_idle": st["gen_idle"], "timing_s/trainer_wait": st["trainer_wait"],
                        "rollout/dropped_stale_groups": st["dropped"], "rollout/dropped_stale_tokens": st["dropped_tokens"],
                        "rollout/drop_rate": st["dropped"] / max(1, st["dropped"] + st["taken"]),
                        "rollout/queue_groups": len(self.queue)})
        if st["dropped_rows"]:  # dropping stale groups favours short rollouts: compare the two means
            metrics["rollout/dropped_stale_length/mean"] = st["dropped_tokens"] / st["dropped_rows"]
            metrics["rollout/taken_length/mean"] = st["taken_tokens"] / max(1, st["taken_rows"])
        self.stats = _window()

    def generate(self, policy, n, step, skip=None, metrics=None):
        self.skip = skip
        if not self.started:
            self.trainer_version = step - 1
            if self.keep_versions:
                self.snapshots[step - 1] = trainable_state(policy)
            self.thread.start()
            self.started = True
        t0 = time.time()
        with self.cond:
            taken = self._take(n, step)
            self.stats["trainer_wait"] += time.time() - t0
            if metrics is not None:
                self._report(metrics)
        for i, (_, b) in enumerate(taken):
            b.group = torch.full_like(b.group, i)
        return [e for e, _ in taken], RolloutBatch.concat([b for _, b in taken], self.engine.tok.pad_token_id)

    def versions(self):
        return self.snapshots

    def push(self, policy, version):
        if self.keep_versions:  # no group older than k versions reaches the loss
            keep_last(self.snapshots, version, policy, self.k)
        payload = self.engine.export_weights(policy)  # trainer side: a detached copy
        with self.cond:
            self.pending = (payload, version)
            self.trainer_version = version
            self.cond.notify_all()

    @contextmanager
    def serving(self, policy, version):
        with self.engine_lock:  # waits for the generator's current chunk
            with self.cond:
                self.pending = None
            self.engine.sync(policy, version)
            yield self.engine

    @contextmanager
    def paused(self):
        with self.engine_lock:
            yield

    def state_dict(self):
        """Taken while paused: the prompts drawn but not trained on (to generate again, then queued)."""
        with self.cond:
            return {"redo": [*self.redo, *(e.index for e, _ in self.queue)]}

    def load_state_dict(self, state):
        self.redo = deque(int(i) for i in state.get("redo", []))

    def close(self):
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        if self.started:
            self.thread.join()
        self.engine.between_steps = None


def build_schedule(cfg, engine, task, sampling: SamplingParams, generator: torch.Generator, tok, noise=None,
                   keep_versions: bool = False):
    """The `cfg.mode` schedule (cfg: rollout config); `keep_versions`: async keeps the versions it may sample from."""
    interrupt = None
    if cfg.interrupt.enabled:
        interrupt = (phrase_ids(tok, cfg.interrupt.phrase), int(cfg.interrupt.answer_tokens))
    args = (engine, task, int(cfg.group_size), sampling, generator)
    kw = dict(noise=noise, interrupt=interrupt)
    if cfg.mode == "stale" and cfg.max_staleness > 0:
        return StaleSchedule(*args, k=int(cfg.max_staleness), **kw)
    if cfg.mode == "async":
        return AsyncSchedule(*args, k=int(cfg.max_staleness), prompts_per_step=int(cfg.prompts_per_step),
                             keep_versions=keep_versions, policy=str(cfg.staleness_policy),
                             queue_batches=int(cfg.queue_batches), **kw)
    return SyncSchedule(*args, **kw)
