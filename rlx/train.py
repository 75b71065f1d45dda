"""rlx training entry point: `python -m rlx.train [overrides]`.

One RL experiment, top to bottom: `run` holds the run directory, `build` makes the parts the config names,
and `train` is the loop, whose body is one RL step's calls in order:

    generate -> score -> shape -> update -> extrapolate -> sync -> evaluate (when due) -> log -> checkpoint

each a function of its package, with `train.callbacks` (rlx.run.callbacks) at each step's start and end.
Departures from textbook GRPO are config switches, off by default, named where they act (docs/engine.md)."""

from __future__ import annotations

import contextlib
import functools
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from torch.distributed.elastic.multiprocessing.errors import record

from rlx.algo import Shaping, Update, mismatch_split
from rlx.algo.completions import completion_rows
from rlx.algo.data_parallel import DataParallel
from rlx.config import register_configs
from rlx.config.limits import check_fits
from rlx.config.preflight import check
from rlx.envs import check_env, env_task, instruction_tokens, wrap_engine
from rlx.eval.evaluate import Evaluator
from rlx.extrapolation import build_extrapolator
from rlx.models import base_dir, build_policy, count_params, reference_policy
from rlx.models import base_label, sft_record  # what step 0 evaluates: "SFT" (a warm start) or "pretrained"
from rlx.noise import build_noise
from rlx.rollout import SamplingParams, build_engine, max_sequence_len
from rlx.rollout.metrics import SignalMonitor, rollout_metrics
from rlx.rollout.sampled import generate, refill, score
from rlx.rollout.schedule import build_schedule
from rlx.rollout.sharded import ShardedEngine
from rlx.run import distributed as dist
from rlx.run import lock as run_lock
from rlx.run.callbacks import Callbacks
from rlx.run.checkpoint import Checkpointer
from rlx.run.device import DeviceSpec, seed_everything
from rlx.run.logging import say
from rlx.run.records import read_metrics
from rlx.run.resume import Resumable, RunState, finished_before, restore_recorded_config
from rlx.run.session import Session, sweep_job_failed
from rlx.run.threads import ThreadGovernor
from rlx.tasks import build_task
from rlx.tasks.tripwires import TripwireMonitor

register_configs()

# metrics that measure time or the machine's load; everything else in metrics.jsonl is a function of the seed
TIMING_PREFIXES = ("timing_s/", "perf/tokens_per_s", "perf/compute/gpu_hours", "extrap/time_s/", "perf/threads")

_log = say  # under Hydra: its job logging (the console and <run_dir>/train.log); called directly: stdout


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """`python -m rlx.train [overrides]`: one run, or (-m) each job of a sweep; returns its held-out accuracy."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN and "TORCHELASTIC_RUN_ID" in os.environ:
        raise ValueError("torchrun ... -m rlx.train -m: every rank would launch the whole sweep. Run a distributed "
                         "sweep with hydra/launcher=submitit_slurm_ddp (each job's SLURM tasks are its ranks), or "
                         "one torchrun per job (docs/cluster.md)")
    # under torchrun, a rank that raises leaves its traceback where torchrun reports it, with the rank
    run_ = record(run)
    if hc.mode == RunMode.MULTIRUN:
        # one failing arm must not stop the others: its summary.json says "failed", the traceback goes to its log
        try:
            return float(run_(cfg, run_dir)["val/acc"])
        except Exception as e:
            traceback.print_exc()
            sweep_job_failed(run_dir, e)
            _log(f"[sweep] job {hc.job.num} failed; continuing with the other jobs")
            return float("nan")
    return float(run_(cfg, run_dir)["val/acc"])


def run(cfg: DictConfig, run_dir: Path) -> dict:
    """The run in `run_dir` (torchrun: rank 0's): held by this process, skipped if it finished before, else trained."""
    t_start = time.time()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = check(cfg)  # before any process group or model
    threads = ThreadGovernor.started() if cfg.trainer.threads == -1 else None  # one per free core (rlx.run.threads)
    world, run_dir = dist.join(cfg.trainer, run_dir)
    lock = None
    try:
        lock = run_lock.hold(run_dir) if world.is_main else None  # one process per run directory
        done = finished_before(cfg, run_dir)
        if done is not None:  # e.g. a sweep rerun to resume its other jobs
            restore_recorded_config(run_dir, done["config"], world)
            _log(f"[done] {run_dir} already finished this run ({done['steps']} steps, summary.json): nothing to do")
            return done
        return train(build(cfg, run_dir, world, trainer), t_start, threads)
    finally:
        dist.close(world)
        if lock is not None:
            lock.close()


@dataclass
class Parts:
    """Everything one run is made of (what `build` returns and `train` drives)."""

    cfg: DictConfig
    run_dir: Path
    trainer: DeviceSpec
    task: object
    policy: torch.nn.Module
    tok: object
    engine: object
    schedule: object
    opt: torch.optim.Optimizer
    sched: object
    noise: object
    extrap: object
    curriculum: object
    gen: torch.Generator  # the rollout sampling stream
    sampling: SamplingParams
    n_params: int
    world: dist.World = field(default_factory=dist.World)  # this rank of the torchrun job (one process: rank 0 of 1)
    dp: DataParallel | None = None  # how this rank's update meets the others'
    ref_policy: torch.nn.Module | None = None  # full fine-tuning with algo.beta > 0: the frozen reference copy
    shaping: Shaping | None = None  # algo's shaping step (overlong rewards, curriculum, refill / filter)
    update: Update | None = None  # algo's policy update, bound to the algo config at build
    evaluate: Evaluator | None = None  # held-out evaluation, bound to the task and the validation sampling
    checkpoint: Resumable | None = None  # what a checkpoint stores and a resume restores
    state: RunState = field(default_factory=RunState)  # step resumed after, run id, compute so far
    tripwires: TripwireMonitor | None = None  # the hack tripwires' moving means (rlx.tasks.tripwires): [warn] lines
    signal: SignalMonitor | None = None  # steps in a row without a group that differs (rlx.rollout.metrics): [warn]
    callbacks: Callbacks = field(default_factory=Callbacks)  # train.callbacks (rlx.run.callbacks)

    def compute_now(self) -> dict:
        return self.state.compute_now(self.trainer.num_devices)


def build(cfg, run_dir: Path, world: dist.World | None = None, trainer: DeviceSpec | None = None) -> Parts:
    """Every part of the run; `trainer` is what `check(cfg)` returned when the caller already ran it."""
    trainer = trainer or check(cfg)
    world = world or dist.World()
    callbacks = Callbacks(cfg.train.callbacks)  # a bad import path fails before anything is built
    ckpt = Checkpointer(Path(run_dir) / "ckpt")
    if cfg.train.resume == "never" and ckpt.steps():
        raise ValueError(f"train.resume=never but {ckpt.root} holds checkpoints {ckpt.steps()}: starting over "
                         f"would overwrite them. Use a new hydra.run.dir, or move the old ckpt/ aside")
    seed_everything(cfg.seed)
    task = env_task(cfg.env, cfg.seed, cfg.task) or build_task(cfg.task)  # env=verifiers/trl bring their own
    check_fits(cfg, task)  # the tiny model's context holds prompt + completion (needs the task's prompts)
    check_env(cfg, task)  # ... and an environment's instructions and episode budget
    task.set_seed(cfg.seed)
    # rank 0 builds (and caches) the SFT base first; the others wait as long as a build takes, then load it
    policy, tok = dist.main_first(world, lambda: build_policy(cfg, task, _log, trainer.device))
    seed_everything(cfg.seed)  # the same RNG streams whether the SFT base came from the cache or not
    ref_policy = reference_policy(cfg, policy)  # of the base as built: before a checkpoint is loaded
    # the newest intact checkpoint's adapter, into the whole module before FSDP shards it (the rest: restore below)
    found = ckpt.load_latest(policy, _log) if cfg.train.resume == "auto" else None
    dp = DataParallel(policy, world, cfg.trainer.strategy, trainer.device)  # fsdp: before the optimizer
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, functools.partial(_warmup, warm=max(1, cfg.algo.warmup_steps)))
    shaping = Shaping.from_config(cfg)
    noise = build_noise(cfg.noise, cfg.train.steps, cfg.seed)
    sampling = SamplingParams.from_config(cfg.rollout)
    p = Parts(cfg, Path(run_dir), trainer, task, policy, tok, None, None, opt, sched,
              noise=noise, extrap=build_extrapolator(cfg.extrapolation, cfg.train.steps), curriculum=shaping.curriculum,
              gen=torch.Generator().manual_seed(cfg.seed), sampling=sampling, n_params=count_params(policy),
              world=world, dp=dp, ref_policy=ref_policy, shaping=shaping, callbacks=callbacks,
              evaluate=Evaluator(task, cfg.rollout, sampling, cfg.seed, world, cfg.train.progress, Path(run_dir) / "eval"),
              update=Update.from_config(cfg, trainer, sched, train_noise=noise if cfg.noise.apply_in_train_forward
                                          else None, ref_policy=ref_policy, algo=shaping.algo))
    probe = [e.prompt for e in task.train[:64]] + [e.prompt for ex in task.eval_sets.values() for e in ex[:64]]
    # built before resume: vLLM seeds the global RNGs when it starts, resume must restore them after
    max_len = max_sequence_len(cfg.rollout, tok, probe) + instruction_tokens(cfg.env, tok)  # + a tool's instructions
    p.engine = build_engine(cfg.rollout, tok, policy, trainer, fp32_head=cfg.algo.fp32_lm_head, base_dir=base_dir(cfg),
                            seed=cfg.seed, max_len=max_len, quant_format=cfg.quant.format,
                            own_weights=cfg.rollout.mode == "async", log_dir=Path(run_dir) / "servers")
    p.engine = wrap_engine(cfg.env, p.engine, tok)  # env=none: the engine itself; else multi-turn episodes (rlx/envs)
    if world.distributed:  # each rank samples its share of the prompts; every rank gets the whole batch
        p.engine = ShardedEngine(p.engine, world, dp.gathered)
    p.schedule = build_schedule(cfg.rollout, p.engine, task, p.sampling, p.gen, tok, noise=p.noise,
                                keep_versions=cfg.algo.mismatch_split_every > 0)
    p.checkpoint = Resumable(cfg, Path(run_dir), ckpt, world, dp, trainer.num_devices, policy, opt, sched, p.gen,
                             task, p.curriculum, p.extrap, p.schedule)
    p.checkpoint.restore(found, p.state)
    p.engine.sync(policy, p.state.start_step)  # the engine samples from the (resumed) policy
    # the monitors of a resumed run replay its logged steps: no climb forgotten, no warning repeated
    p.tripwires = TripwireMonitor.for_run(run_dir, p.state.start_step)
    p.signal = SignalMonitor.for_run(run_dir, p.state.start_step, patience=cfg.train.no_signal_steps)
    return p


def train(p: Parts, t_start: float, threads: ThreadGovernor | None = None) -> dict:
    """The RL loop: the step-0 evaluation, then one step per pass. Returns summary.json's (written even on failure)."""
    cfg, world, state = p.cfg, p.world, p.state
    session = Session.open(cfg, p.run_dir, world, state.run_id, state.start_step)
    try:
        session.begin(_base_accuracy(p, session.logger), state.start_step)
        for step in range(state.start_step + 1, cfg.train.steps + 1):
            p.callbacks.on_step_start(step, world)
            t_step = time.time()
            m = {"perf/threads": threads.tick()} if threads is not None else {}  # other jobs may have come or gone
            with timed(m, "gen"):  # AQN: the noise is in the sampling policy only
                examples, batch = generate(p.schedule, p.policy, p.curriculum, cfg.rollout.prompts_per_step, step, m)
                per_fn, rewards, passed = score(p.task, examples, batch)
                rewards = p.shaping.rewards(batch, rewards)  # DAPO's overlong punishment, before any metric reads them
                rows = observe(p, step, m, examples, batch, per_fn, rewards, passed)
                shaped, consumed, generated = shape(p, step, m, examples, batch, rewards, passed)
            p.engine.sleep()  # rollout.vllm.sleep_mode (GPU): vLLM's memory is the trainer's until the sync
            if _due(step, cfg.algo.mismatch_split_every):  # engine vs staleness parts of the mismatch, before the update
                m.update(mismatch_split(p.policy, shaped.batch, cfg, p.trainer, step - 1, p.schedule.versions()))
            with timed(m, "train"):
                update_metrics, trained = p.update(p.policy, p.opt, shaped, p.dp, step)
                m.update(update_metrics)
            m.update(extrapolate(p, step))
            with timed(m, "sync"):  # after the update and any jump: version `step` goes to the generator
                p.schedule.push(p.policy, step)
            m.update(p.engine.metrics())
            state.count_step(p.n_params, generated, trained)  # perf/compute/*
            m["perf/tokens_per_s"] = generated / max(m["timing_s/gen"], 1e-9)
            if _due(step, cfg.train.eval_every, last=cfg.train.steps):
                m.update(evaluation(p, step))
            m["timing_s/step"] = time.time() - t_step
            session.log(step, m, rows, consumed)
            if _due(step, cfg.train.ckpt_every, last=cfg.train.steps):
                state.run_id = session.logger.run_id
                p.checkpoint.save(step, state)
            p.callbacks.on_step_end(step, m, world)
        session.finish(finish_summary(p.run_dir, cfg, p.compute_now()) if world.is_main
                       else {"status": "finished", "val/acc": session.last_acc})
    except BaseException as e:
        session.fail(e)
        raise
    finally:
        p.schedule.close()
        p.engine.close()
        session.close(t_start - state.wall_offset)
    summary = session.summary
    _log(f"[done] held-out accuracy: {base_label(cfg)} base {summary['val/acc_base']:.3f} -> after RL "
         f"{summary['val/acc']:.3f} ({cfg.train.steps} steps, {summary['wall_s']:.0f}s) run dir {p.run_dir}")
    return summary


def observe(p: Parts, step: int, m: dict, examples, batch, per_fn, rewards, passed) -> list | None:
    """The rollout's metrics into `m`, its warnings into the log; returns the completion rows (None unless due)."""
    m.update(rollout_metrics(p.task, batch, rewards, per_fn, passed, step, p.cfg.rollout.group_size, examples))
    if batch.env_reward is not None:  # the part of train/reward/mean the environment paid
        m["train/env_reward/mean"] = batch.env_reward.float().mean().item()
    for warning in p.tripwires.update(step, m):  # a hack tripwire's moving mean crossed its threshold
        _log(warning)
    rows = completion_rows(p.cfg, step, examples, batch, per_fn, rewards, passed)
    m.update(p.task.reward_stats())  # bounded math_verify: timeouts / refused inputs / worker errors
    if step == p.state.start_step + 1 and m["response_length/clip_ratio"] > 0.5:
        _log(f"[warn] {100 * m['response_length/clip_ratio']:.0f}% of the completions hit rollout.max_new_tokens="
             f"{p.cfg.rollout.max_new_tokens} without eos: the budget is probably too small for this task")
    return rows


def shape(p: Parts, step: int, m: dict, examples, batch, rewards, passed):
    """Curriculum, then dynamic sampling's refill or the zero-variance filter (rlx.algo.Shaping). Returns the
    shaped batch, the examples consumed, refills included (the prompt ledger), and the tokens generated."""
    consumed = list(examples)
    shaped = p.shaping.shape(examples, batch, rewards, passed, refill=functools.partial(
        refill, p.schedule, p.policy, p.curriculum, p.task, p.shaping, step, consumed))
    m.update(shaped.metrics)
    for warning in p.signal.update(step, m):  # no group differed, refills included: no gradient from the reward
        _log(warning)
    # compute counts every generated token: the batch's, the refills' and those of async groups dropped as too stale
    generated = int(batch.completion_mask.sum()) + shaped.gen_tokens + m.get("rollout/dropped_stale_tokens", 0)
    return shaped, consumed, generated


def extrapolate(p: Parts, step: int) -> dict:
    """NExt: rank-1 records, maybe a predict-extend jump of the adapter (no extrapolator: nothing)."""
    if p.extrap is None:
        return {}
    jumping = step in getattr(p.extrap, "extend_at", ())
    if jumping:  # can take minutes (the predictor trains): say so
        _log(f"[extrap] step {step}: predict-extend jump ({p.cfg.extrapolation.type}) ...")
    t_obs = time.time()
    out = p.extrap.observe(p.policy, step, p.opt)
    if jumping:
        _log(f"[extrap] step {step}: jump done in {time.time() - t_obs:.1f}s")
    return out


def evaluation(p: Parts, step: int) -> dict:
    """The held-out evaluation at `step`, its time and the compute spent so far; an [eval] line."""
    t0 = time.time()
    m = p.evaluate(p.schedule, p.policy, step)
    m["timing_s/eval"] = time.time() - t0
    m.update(p.compute_now())
    _log(f"[eval] step {step}: val/acc {m['val/acc']:.3f}{_readings_text(m)}"
         + (f", mean@{m['val/k']} {m['val/mean_at_k']:.3f}" if "val/mean_at_k" in m else "")
         + f" ({m['timing_s/eval']:.1f}s)")
    return m


@contextlib.contextmanager
def timed(m: dict, name: str):
    """m["timing_s/<name>"] = the block's wall time."""
    t0 = time.time()
    yield
    m[f"timing_s/{name}"] = time.time() - t0


def _due(step: int, every: int, last: int | None = None) -> bool:
    """Step `step` is one of every `every`-th (0 = never), or the last."""
    return (every > 0 and step % every == 0) or step == last


def _warmup(s: int, warm: int) -> float:
    return min(1.0, (s + 1) / warm)


def _readings_text(m: dict) -> str:
    """The benchmark's readings beside the task's verdict (rlx.tasks.answers.readings): ' (strict-match 0.01, ...)'."""
    from rlx.tasks.answers.readings import READINGS

    found = [f"{r} {m[f'val/{r}']:.3f}" for r in READINGS if f"val/{r}" in m]
    return f" ({', '.join(found)})" if found else ""


def _base_accuracy(p: Parts, logger) -> float:
    """The step-0 evaluation (run now on a fresh run, read back from metrics.jsonl on a resumed one)."""
    if p.state.start_step == 0:
        t0 = time.time()
        ev = p.evaluate(p.schedule, p.policy, 0)
        logger.log({**ev, **p.compute_now(), **(sft_record(p.cfg) or {}), "timing_s/eval": time.time() - t0}, step=0)
        _log(f"[eval] step 0 ({base_label(p.cfg)} base): val/acc {ev['val/acc']:.3f}{_readings_text(ev)}")
        if p.extrap is not None:
            p.extrap.observe(p.policy, 0, p.opt)
    return p.world.broadcast(next((r["val/acc"] for r in read_metrics(p.run_dir) if r["step"] == 0), float("nan"))
                             if p.world.is_main else None)


def finish_summary(run_dir: Path, cfg, compute: dict) -> dict:
    """summary.json of a finished run: the last evaluation, the compute spent, and the scaling fit if asked."""
    last_eval = [r for r in read_metrics(run_dir) if "val/acc" in r][-1]
    out = {"status": "finished", "val/acc": last_eval["val/acc"], "val/mean_at_k": last_eval.get("val/mean_at_k"),
           "steps": cfg.train.steps, **compute,
           "config": OmegaConf.to_container(cfg, resolve=True)}  # a rerun with this config has nothing to do
    if cfg.scaling.fit != "none":
        from rlx.scaling import fit_run

        try:
            out.update(fit_run(run_dir, cfg.scaling))
        except ValueError as e:  # a fit that cannot be made is reported, not hidden
            out["scaling/error"] = str(e)
            _log(f"[scaling] no fit: {e}")
    return out


if __name__ == "__main__":
    main()
