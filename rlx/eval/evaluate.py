"""Held-out evaluation through the rollout engine: `run_eval` generates and scores every eval set, for training's
`Evaluator` (val/*) and `python -m rlx.eval` alike; chunked for progress, which changes no sample (docs/eval.md).
"""

from __future__ import annotations

import contextlib

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from rlx.run.logging import say
from rlx.rollout.base import SamplingParams, draw_seeds

PROGRESS_EVERY_S = 10.0  # the least time between two progress lines (a bar, on a TTY, redraws at every chunk)


@dataclass
class SetResult:
    """What one eval set generated and scored: greedy and (if k > 0) k samples per prompt."""

    name: str
    examples: list  # [P] rlx.tasks.Example
    greedy: list[str]  # [P] completions
    greedy_passed: list[bool]  # [P]
    greedy_reward: list[float]  # [P] weighted total reward
    k: int = 0
    samples: list[str] | None = None  # [P * k], k consecutive samples per prompt
    samples_passed: list[bool] | None = None  # [P * k]
    samples_reward: list[float] | None = None  # [P * k]
    # the benchmark's own readings (rlx.tasks.answers.readings), beside the task's verdict: {reading: [{answer, passed}]}
    greedy_readings: dict | None = None  # each list [P]
    samples_readings: dict | None = None  # each list [P * k]
    # multi-turn episodes: each greedy row's transcript (rlx.envs.engine.transcript); `greedy` holds the last turn
    greedy_episodes: list[str] | None = None  # [P]

    def reading_acc(self) -> dict[str, float]:
        """Greedy accuracy under each benchmark reading."""
        return {name: sum(r["passed"] for r in rows) / len(self.examples)
                for name, rows in (self.greedy_readings or {}).items()}

    @property
    def acc(self) -> float:
        return sum(self.greedy_passed) / len(self.examples)

    @property
    def mean_at_k(self) -> float:
        return sum(self.samples_passed) / (len(self.examples) * self.k)


class EvalProgress:
    """Progress of one evaluation: a tqdm bar when `bar` (None: on a TTY), else a line every PROGRESS_EVERY_S."""

    def __init__(self, total: int, label: str, show: bool = True, bar: bool | None = None, log=say):
        self.total, self.label, self.show, self.log = total, label, show, log
        self.done = self.tokens = 0
        self.t0 = self.last = time.time()
        self.bar = None
        if show and (sys.stderr.isatty() if bar is None else bar):
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="seq", leave=False, dynamic_ncols=True)

    def __enter__(self) -> "EvalProgress":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()

    def start(self, what: str) -> None:
        if self.show and self.bar is None:
            self.log(f"{self.label}: {what}")

    def update(self, rows: int, tokens: int) -> None:
        self.done += rows
        self.tokens += tokens
        if not self.show:
            return
        if self.bar is not None:
            self.bar.update(rows)
            self.bar.set_postfix_str(f"{self.tokens / max(time.time() - self.t0, 1e-9):.0f} tok/s")
        elif time.time() - self.last >= PROGRESS_EVERY_S or (self.done == self.total and self.last > self.t0):
            self.last = time.time()
            dt = max(time.time() - self.t0, 1e-9)
            eta = (self.total - self.done) * dt / self.done if self.done else float("nan")
            self.log(f"{self.label}: {self.done}/{self.total} sequences, {self.tokens} tokens, "
                     f"{self.tokens / dt:.1f} tok/s, {dt:.0f}s elapsed, ETA {eta:.0f}s")


def eval_generator(seed: int, step: int) -> torch.Generator:
    """The evaluation's own sampling stream (eval never shifts the training RNG; rlx-eval reproduces it)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def eval_sampling(rollout, sampling: SamplingParams | None = None) -> tuple[SamplingParams, SamplingParams | None]:
    """(greedy, sampled) settings from rollout.* over `sampling` (training's); sampled None when eval_k is 0."""
    sp = (sampling or SamplingParams.from_config(rollout)).but(max_tokens=rollout.eval_max_new_tokens or rollout.max_new_tokens)
    if rollout.eval_k == 0:
        return sp.but(temperature=0.0), None
    sampled = sp.but(temperature=float(rollout.eval_temperature))
    if rollout.eval_top_p is not None:
        sampled = sampled.but(top_p=float(rollout.eval_top_p))
    if rollout.eval_top_k is not None:
        sampled = sampled.but(top_k=int(rollout.eval_top_k))
    return sp.but(temperature=0.0), sampled


FIRST_CHUNK = 32  # rollout.eval_chunk=0: the first engine call's rows; later calls are sized by its speed
CHUNK_TARGET_S = 3 * PROGRESS_EVERY_S  # ... so that each call (one progress update) takes about this long


def next_chunk(cap: int, fixed: bool, rows_done: int, seconds: float, least: int = 0) -> int:
    """Rows of the next engine call: `cap` when fixed; else FIRST_CHUNK, then what the calls so far did in
    CHUNK_TARGET_S, at least FIRST_CHUNK // 2 and `least` (the engine's concurrent rows), at most `cap`."""
    if fixed:
        return cap
    if rows_done == 0 or seconds <= 0:
        return min(cap, max(FIRST_CHUNK, least))
    return min(cap, max(FIRST_CHUNK // 2, least, int(rows_done / seconds * CHUNK_TARGET_S)))


def generate_texts(engine, prompts: list, n: int, sp: SamplingParams, seeds: list[int], chunk: int,
                   progress: EvalProgress, fixed: bool = True, cut: list | None = None,
                   episodes: list | None = None) -> list[str]:
    """n completions per prompt, prompt-major ([len(prompts) * n]), at most `chunk` rows per engine call (`fixed`:
    exactly), row i sampled from seeds[i]. An engine that reports finished rows (`on_finished`: vLLM) refills its
    slots itself, so it gets the whole pass unless `fixed`. `cut` / `episodes` get each row's truncation flag /
    transcript (None: unknown / no environment tokens)."""
    rows = [q for q in prompts for _ in range(n)]  # one engine row each: chunks may end inside a prompt's samples
    texts: list[str] = []
    reports = hasattr(engine, "on_finished")
    least = int(getattr(engine, "concurrency", 0) or 0)
    s, t0 = 0, time.monotonic()
    if reports:
        engine.on_finished = progress.update
    try:
        while s < len(rows):
            size = len(rows) - s if reports and not fixed else next_chunk(chunk, fixed, s, time.monotonic() - t0, least)
            batch = engine.generate(rows[s: s + size], 1, sp, None, seeds=seeds[s: s + size])
            texts += batch.texts
            if episodes is not None:
                episodes += _episodes(engine, batch)
            if cut is not None:
                flags = getattr(batch, "truncated", None)
                cut += flags.tolist() if flags is not None else [None] * len(batch.texts)
            if not reports:
                progress.update(len(batch), int(batch.completion_mask.sum()))
            s += size
    finally:
        if reports:
            engine.on_finished = None
    return texts


def _episodes(engine, batch) -> list[str | None]:
    """Each row's transcript (rlx.envs.engine.transcript) where the row holds tokens the policy did not sample."""
    forced = getattr(batch, "forced", None)  # [N, T] bool, or None
    if forced is None:
        return [None] * len(batch.texts)
    from rlx.envs.engine import transcript

    return [transcript(engine.tok, batch, r) if bool(forced[r].any()) else None for r in range(len(batch.texts))]


def _scored(task, examples, texts, cut: list | None = None) -> tuple[list[bool], list[float]]:
    """Pass flags and rewards; `cut` per completion (truncated at the budget), when every flag is known."""
    truncated = cut if cut is not None and None not in cut else None
    per_fn = task.score(examples, texts) if truncated is None else task.score(examples, texts, truncated)
    return task.passed(per_fn), task.total_reward(per_fn)


def _readings(task, examples, texts) -> dict:
    """The benchmark's readings of these completions (task.readings, else by the golds), never the reward's."""
    from rlx.tasks.answers.readings import read, readings_for

    return read(readings_for(examples, task.cfg.get("readings")), texts, [e.answer for e in examples])


def run_eval(engine, task, rollout, generator: torch.Generator, sampling: SamplingParams | None = None,
             label: str = "[eval]", show: bool = True, bar: bool | None = None,
             by_speed: bool = True) -> list[SetResult]:
    """Greedy and rollout.eval_k sampled completions of every eval set, scored by the task's rewards. `by_speed=False`:
    eval_chunk=0 means the engine's whole batch, not a size from this process's timing (ranks must call alike)."""
    greedy_sp, sampled_sp = eval_sampling(rollout, sampling)
    k = rollout.eval_k if sampled_sp is not None else 0
    names = list(task.eval_sets)
    sets = [task.eval_sets[n] for n in names]
    prompts = [e.prompt for ex in sets for e in ex]
    # the seeds one engine call per pass would draw, in the same order: greedy rows, then sampled rows
    greedy_seeds = draw_seeds(generator, len(prompts))
    sampled_seeds = draw_seeds(generator, len(prompts) * k) if k else []
    # rows per engine call at most: rollout.eval_chunk, else what the engine generates at once anyway
    chunk = int(rollout.eval_chunk) if rollout.eval_chunk > 0 else int(
        rollout.vllm.max_num_seqs if rollout.engine == "vllm" else rollout.batch_size)
    with EvalProgress(len(prompts) * (1 + k), label, show=show, bar=bar) as progress:
        progress.start(f"{len(prompts)} prompts: {len(prompts)} greedy + {k} x {len(prompts)} sampled sequences "
                       f"(up to {greedy_sp.max_tokens} tokens), {chunk} per engine call")
        fixed = rollout.eval_chunk > 0 or not by_speed
        greedy_cut, sampled_cut = [], []  # [sum(P)], [sum(P) * k]: rows the token budget stopped
        episodes = []  # [sum(P)]: transcripts of multi-turn rows, else None
        greedy = generate_texts(engine, prompts, 1, greedy_sp, greedy_seeds, chunk, progress, fixed, greedy_cut,
                                episodes)
        sampled = (generate_texts(engine, prompts, k, sampled_sp, sampled_seeds, chunk, progress, fixed, sampled_cut)
                   if k else None)
    out, i = [], 0
    for name, ex in zip(names, sets):  # scored set by set, greedy first, as always (import-path rewards see these batches)
        texts = greedy[i: i + len(ex)]
        passed, reward = _scored(task, ex, texts, greedy_cut[i: i + len(ex)])
        eps = episodes[i: i + len(ex)]
        out.append(SetResult(name, ex, texts, passed, reward, k, greedy_readings=_readings(task, ex, texts),
                             greedy_episodes=eps if any(e is not None for e in eps) else None))
        i += len(ex)
    if sampled is not None:  # [sum(P) * k], k consecutive samples per prompt
        i = 0
        for r in out:
            texts = sampled[i: i + len(r.examples) * k]
            r.samples = texts
            rows = [e for e in r.examples for _ in range(k)]
            r.samples_passed, r.samples_reward = _scored(task, rows, texts, sampled_cut[i: i + len(texts)])
            r.samples_readings = _readings(task, rows, texts)
            i += len(texts)
    return out


def val_metrics(results: list[SetResult], named: bool) -> dict:
    """Training's val/* metrics of `run_eval`'s result: per set when `named`, and the sets' unweighted mean."""
    per_set = {r.name: {"acc": r.acc, **({"mean_at_k": r.mean_at_k} if r.k else {}), **r.reading_acc()}
               for r in results}
    out = {}
    if named:
        for name, m in per_set.items():
            out.update({f"val/{name}/{key}": v for key, v in m.items()})
    out["val/acc"] = sum(m["acc"] for m in per_set.values()) / len(per_set)
    shared = set.intersection(*(set(r.reading_acc()) for r in results))  # readings every set has: their mean
    for reading in sorted(shared):
        out[f"val/{reading}"] = sum(m[reading] for m in per_set.values()) / len(per_set)
    if results[0].k:
        out["val/mean_at_k"] = sum(m["mean_at_k"] for m in per_set.values()) / len(per_set)
        out["val/k"] = results[0].k
    return out


@dataclass
class Evaluator:
    """Held-out evaluation as training runs it, with the current policy, never under AQN noise."""

    task: object
    rollout: object  # the rollout config node (budget, eval_k, chunking)
    sampling: object  # the run's SamplingParams (eval_sampling derives validation's from it)
    seed: int
    world: object  # this rank: only rank 0 reports progress; N ranks size calls alike
    progress: bool  # train.progress: a bar, else log lines
    out_root: Path | None = None  # RUN/eval: each evaluation's per-problem files go to out_root/step_N (rank 0)

    def __call__(self, schedule, policy, step: int) -> dict:
        g = eval_generator(self.seed, step)
        bar = None if self.progress else False
        with schedule.serving(policy, step) as engine, getattr(engine, "uncounted", contextlib.nullcontext)():
            # the current policy, whatever the schedule samples from; its episodes are not training's env/*
            results = run_eval(engine, self.task, self.rollout, g, self.sampling, label=f"[eval] step {step}",
                               show=self.world.is_main, bar=bar, by_speed=not self.world.distributed)
        val = val_metrics(results, self.task.named_eval)
        if self.out_root is not None and self.world.is_main:
            self.write(step, results, val)
        return val

    def write(self, step: int, results: list[SetResult], val: dict) -> None:
        """rlx-eval's three files for this step in out_root/step_N: rlx.eval.paired compares evaluations from them."""
        from dataclasses import asdict

        from rlx.eval.report import summarize, write

        greedy, sampled = eval_sampling(self.rollout, self.sampling)
        report = {"source": {"kind": "training", "path": None, "checkpoint": None, "step": step, "label": f"step_{step}"},
                  "task": getattr(self.task, "name", type(self.task).__name__), "model": None,
                  "engine": self.rollout.engine, "seed": self.seed, "ks": [],
                  "sampling": {"n": results[0].k, "greedy": asdict(greedy), "samples": asdict(sampled) if sampled else None},
                  "sets": summarize(results, []), "val": val}
        write(self.out_root / f"step_{step}", report, results)
