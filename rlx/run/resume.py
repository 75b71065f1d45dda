"""What a checkpoint stores of a run (everything the next step depends on) and how the run continues from it:
a config that differs from the recorded one is refused, bookkeeping keys aside (docs/runs.md)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from rlx.run.checkpoint import Checkpointer
from rlx.run.device import rng_state, set_rng_state
from rlx.run import distributed as dist
from rlx.run.logging import say as _log


@dataclass
class RunState:
    """The step the run resumed after, its wandb run id and the compute spent (earlier wall time: `wall_offset`)."""

    start_step: int = 0
    run_id: str | None = None
    compute: dict = field(default_factory=lambda: {"flops": 0.0, "tokens": 0.0, "steps": 0.0, "gpu_hours": 0.0})
    t_run: float = field(default_factory=time.time)
    wall_offset: float = 0.0

    def compute_now(self, num_devices: int) -> dict:
        """perf/compute/*: flops, tokens, steps, and gpu_hours = devices x wall hours (resumes included)."""
        self.compute["gpu_hours"] = num_devices * (self.wall_offset + time.time() - self.t_run) / 3600.0
        return {f"perf/compute/{k}": v for k, v in self.compute.items()}

    def count_step(self, n_params: int, generated: int, trained: int) -> None:
        """One RL step's compute: 2N FLOPs per generated token, 6N per trained one (N parameters)."""
        self.compute["steps"] += 1
        self.compute["tokens"] += generated
        self.compute["flops"] += 2.0 * n_params * generated + 6.0 * n_params * trained


@dataclass
class Resumable:
    """The components whose state a checkpoint holds: `save` stores them, `restore` puts a checkpoint back."""

    cfg: DictConfig
    run_dir: Path
    ckpt: Checkpointer
    world: dist.World
    dp: object  # the update's rlx.algo.data_parallel.DataParallel
    num_devices: int
    policy: torch.nn.Module
    opt: torch.optim.Optimizer
    sched: object  # the LR schedule
    gen: torch.Generator  # the rollout sampling stream
    task: object
    curriculum: object
    extrap: object
    schedule: object  # the rollout schedule (stale mode keeps policy versions)

    def restore(self, found: tuple | None, state: RunState) -> None:
        """Restore from `found` = (path, state) of Checkpointer.load_latest (the weights are loaded by then)."""
        if found is None:
            return
        latest, st = found
        self.dp.load_optimizer_state(self.policy, self.opt, st["optimizer"])
        self.sched.load_state_dict(st["scheduler"])
        set_rng_state(st["rng"])
        self.gen.set_state(st["rollout_rng"])
        self.task.load_state_dict(st["task"])
        if self.curriculum is not None:
            self.curriculum.load_state_dict(st["curriculum"])
        if self.extrap is not None:
            self.extrap.load_state_dict(st["extrapolator"])
        if st.get("schedule"):  # stale mode: the last k + 1 policy versions (async: the queue is not kept)
            self.schedule.load_state_dict(st["schedule"])
        refuse_changes(latest, st.get("config"), self.cfg, self.run_dir, self.world, st.get("dtype"))
        state.start_step, state.run_id, state.compute = st["step"], st["wandb_run_id"], st["compute"]
        state.wall_offset = state.compute["gpu_hours"] * 3600.0 / self.num_devices
        _log(f"[resume] from {latest} (step {state.start_step})")

    def save(self, step: int, state: RunState) -> None:
        """Checkpoint step `step`: rank 0 writes, every rank takes part."""
        state.compute_now(self.num_devices)  # bring the wall-time compute up to date before it is stored
        weights = self.dp.gathered_trainable(self.policy)  # fsdp: whole tensors
        optimizer = self.dp.optimizer_state(self.policy, self.opt)
        dist.check_agreement(self.world, self.dp.checksum(self.policy, weights), f"the trainable weights at step {step}")
        if not self.world.is_main:  # rank 0 writes; the others wait until the checkpoint is complete
            self.world.barrier()
            return
        with self.schedule.paused():  # async: no generation touches the task or the RNG streams while they are read
            self.ckpt.save(step, self.policy, {
                "step": step, "optimizer": optimizer, "scheduler": self.sched.state_dict(), "rng": rng_state(),
                "rollout_rng": self.gen.get_state(), "task": self.task.state_dict(), "wandb_run_id": state.run_id,
                "curriculum": self.curriculum.state_dict() if self.curriculum is not None else None,
                "extrapolator": self.extrap.state_dict() if self.extrap is not None else None,
                "compute": dict(state.compute), "schedule": self.schedule.state_dict(),
                "config": OmegaConf.to_container(self.cfg, resolve=True),  # what resume compares against
                "dtype": dtype_record(self.cfg),  # the dtype it computes in and the machine that chose it
            }, log=_log, weights=weights)
        self.world.barrier()


def restore_recorded_config(run_dir: Path, ran: dict, world: dist.World) -> None:
    """Put the config that ran back into `.hydra/config.yaml`, which Hydra overwrote with this refused launch's."""
    hydra_cfg = Path(run_dir) / ".hydra" / "config.yaml"
    if hydra_cfg.is_file() and world.is_main:
        hydra_cfg.write_text(OmegaConf.to_yaml(OmegaConf.create(ran)))


def refuse_changes(latest: Path, saved: dict | None, cfg, run_dir: Path, world: dist.World,
                   record: dict | None = None) -> None:
    """Refuse a resume under other settings than the checkpoint's, naming each change (the dtype's: `dtype_refusal`)."""
    changed = config_changes(saved, cfg)
    if not changed:
        return
    restore_recorded_config(run_dir, saved, world)  # Hydra already wrote the refused settings there
    if any(c.startswith("trainer.dtype:") for c in changed):
        raise ValueError(dtype_refusal(f"train.resume=auto from {latest}", saved, cfg, record,
                                       [c for c in changed if not c.startswith("trainer.dtype:")]))
    raise ValueError(f"train.resume=auto from {latest}: the config differs from the one the checkpoint was "
                     f"trained with: {'; '.join(changed)}. Resuming would train under settings the recorded "
                     f"config does not show: run with the original values, or start a new run "
                     f"(another hydra.run.dir). Only bookkeeping keys may change on resume "
                     f"(train.steps, evaluation/checkpoint/log intervals, logger, threads, rollout.eval_chunk, "
                     f"train.no_signal_steps)")


# keys a resumed run may change (bookkeeping, budget, where it runs); anything else is refused
RESUMABLE_CHANGES = ("train.steps", "train.eval_every", "train.ckpt_every", "train.log_every", "train.progress",
                     "train.resume", "train.callbacks", "logger.", "trainer.threads", "trainer.device",
                     "trainer.dist_timeout_s", "model.cache_dir", "paper", "report",
                     "rollout.server.placement",  # where local servers run, as trainer.device
                     "trainer.malloc_mmap_threshold_mb",  # where freed blocks go: no value changes
                     "model.gradient_checkpointing",  # memory only: the recomputed forward gives bitwise the same grads
                     "rollout.eval_chunk",  # evaluation's sequences per engine call: no sample or metric changes
                     "train.no_signal_steps",  # when train.log warns of a lost learning signal: nothing trains otherwise
                     "extrapolation.fit_cache",  # where a fitted NExt predictor is found: the same bits either way
                     "task.default_rewards.",  # the task file's set: what ran is task.rewards, compared
                     # retired: the forced-failure test hook an older run recorded (tests/faults.py now)
                     "train.fail_at_step", "train.fail_rank")


# keys read under one setting only, free to change where neither side has it (prefix -> (setting, value))
UNREAD_UNLESS = {"rollout.server.": ("rollout.engine", "vllm_server"),
                 "rollout.staleness_policy": ("rollout.mode", "async"),
                 "rollout.queue_batches": ("rollout.mode", "async")}


def finished_before(cfg, run_dir: Path) -> dict | None:
    """The summary of a finished run in `run_dir` whose checkpoints were deleted (a rerun skips it), else None."""
    path = Path(run_dir) / "summary.json"
    if cfg.train.resume != "auto" or not path.is_file() or any((Path(run_dir) / "ckpt").glob("step_*")):
        return None
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # unreadable: the run goes ahead and rewrites it
    if summary.get("status") != "finished" or summary.get("steps") != cfg.train.steps or "config" not in summary:
        return None
    changed = config_changes(summary["config"], cfg)
    if changed and all(c.startswith("trainer.dtype:") for c in changed):  # the same run, moved to another kind of machine
        restore_recorded_config(run_dir, summary["config"], dist.World(rank=dist.env_rank()))  # torchrun's or SLURM's
        raise ValueError(dtype_refusal(f"{path} (a finished run)", summary["config"], cfg, summary.get("dtype"), []))
    return summary if not changed else None


def dtype_record(cfg) -> dict:
    """The resolved `trainer.dtype` and the machine that resolved it (device, CPU bf16 flags, GPU name)."""
    import torch

    from rlx.run.device import cpu_bf16_flags

    device = str(cfg.trainer.device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    rec = {"dtype": str(cfg.trainer.dtype), "device": device, "cpu_bf16": cpu_bf16_flags()}
    if device.startswith("cuda") and torch.cuda.is_available():
        rec["gpu"] = torch.cuda.get_device_name()
    return rec


def _machine(rec: dict | None) -> str:
    if not rec:
        return "a machine whose bf16 support was not recorded"
    if str(rec.get("device", "cpu")).startswith("cuda"):
        return f"a GPU ({rec.get('gpu', '?')})"
    flags = list(rec.get("cpu_bf16", []))
    if flags == ["unknown"]:
        return "a CPU whose bf16 instructions were not read"
    return f"a CPU with {'/'.join(flags)}" if flags else "a CPU without bf16 instructions"


def dtype_refusal(where: str, saved: dict, cfg, record: dict | None, other: list[str]) -> str:
    """The refusal of a run resumed in another dtype: both, the machines that chose them, and the two ways on."""
    from rlx.run.device import auto_dtype

    old, new = str((saved.get("trainer") or {}).get("dtype")), str(cfg.trainer.dtype)
    here = dtype_record(cfg)
    auto_here, why_here = auto_dtype(here["device"])
    slow = (" (emulated on this CPU: its matmuls run several times slower than fp32, docs/lean.md)"
            if old == "bf16" and here["device"] == "cpu" and auto_here == "fp32" else "")
    also = f" The config differs in {'; '.join(other)} as well." if other else ""
    return (f"{where}: this run computed in trainer.dtype={old} (as recorded; on {_machine(record)}) and this "
            f"launch would compute in trainer.dtype={new} (on this machine trainer.dtype=auto picks {auto_here}: "
            f"{why_here.removeprefix('auto: ')}). Changing the dtype mid-run changes its numerics, so it is refused."
            f"{also} To keep {old}, rerun with trainer.dtype={old}{slow}; to compute in {new}, start a new run "
            f"(another hydra.run.dir).")


def config_changes(saved: dict | None, cfg) -> list[str]:
    """'key: old -> new' for every setting that differs from the checkpoint's config (bookkeeping keys aside)."""
    if saved is None:  # a checkpoint from before configs were recorded: nothing to compare
        return []
    from rlx.run.records import flatten

    if "env" not in saved:  # recorded before the env group existed: single-turn, i.e. env=none
        # the env group's schema defaults, read from the composed config's own schema (rlx.envs.config)
        saved = {**saved, "env": OmegaConf.to_container(OmegaConf.structured(OmegaConf.get_type(cfg.env)))}
    old, new = flatten(saved), flatten(OmegaConf.to_container(cfg, resolve=True))
    keys = sorted(set(old) | set(new))
    unread = [prefix for prefix, (key, value) in UNREAD_UNLESS.items()  # e.g. an engine neither side runs
              if old.get(key) != value and new.get(key) != value]
    return [f"{k}: {old.get(k, '<unset>')!r} -> {new.get(k, '<unset>')!r}" for k in keys
            if old.get(k) != new.get(k) and not any(k == c.rstrip(".") or k.startswith(c) for c in RESUMABLE_CHANGES)
            and not any(k.startswith(p) for p in unread)]
