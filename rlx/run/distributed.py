"""Data parallelism over torch.distributed (torchrun or SLURM): the process group, prompt shards and the few
collectives the loop needs (docs/cluster.md); a rank that raises ends the run through torchrun."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from rlx.run.device import rank_device


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    # --- collectives (each a no-op, or the identity, in one process) ----------------------------------
    def gather(self, obj) -> list:
        """Every rank's `obj`, in rank order (picklable objects; CPU tensors inside travel as bytes)."""
        if not self.distributed:
            return [obj]
        out = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj, src: int = 0):
        """Rank `src`'s `obj` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In place: the sum (or max) of `t` over ranks."""
        if self.distributed:
            dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return t

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def shard(self, n: int) -> slice:
        """This rank's contiguous share of n items (sizes differ by at most one; may be empty)."""
        return slice(n * self.rank // self.size, n * (self.rank + 1) // self.size)


def env_from_slurm(env: dict, first_host=None) -> dict:
    """torch.distributed's env:// variables from SLURM's, for jobs whose tasks are the ranks; {} when torchrun's
    are set, or outside an `srun` step of several tasks (one process, not rank 0 of N)."""
    if "WORLD_SIZE" in env or int(env.get("SLURM_STEP_NUM_TASKS", "1")) <= 1 or "SLURM_PROCID" not in env:
        return {}
    if "MASTER_ADDR" in env:
        addr = env["MASTER_ADDR"]
    else:
        nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not nodes:
            raise RuntimeError("SLURM job with several tasks but neither MASTER_ADDR nor SLURM_JOB_NODELIST is set: "
                               "cannot tell the ranks where rank 0 listens")
        addr = (first_host or _first_host)(nodes)
    return {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env["SLURM_STEP_NUM_TASKS"], "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
            "MASTER_ADDR": addr, "MASTER_PORT": env.get("MASTER_PORT", str(29500 + int(env.get("SLURM_JOB_ID", "0")) % 1000))}


def _first_host(nodelist: str) -> str:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"scontrol show hostnames {nodelist!r} failed: {out.stderr.strip()}")
    return out.stdout.split()[0]


def env_rank() -> int:
    """This process's rank as the launcher set it (0 when launched alone), readable before any init."""
    return int(os.environ.get("RANK") or env_from_slurm(dict(os.environ)).get("RANK") or 0)


def env_local_rank() -> int:
    """This process's rank on its node (torchrun's LOCAL_RANK, or SLURM's SLURM_LOCALID), before any init."""
    return int(os.environ.get("LOCAL_RANK") or env_from_slurm(dict(os.environ)).get("LOCAL_RANK") or 0)


def launched_world_size() -> int:
    """Processes this job was launched as (torchrun's WORLD_SIZE, or SLURM's task count), before any init."""
    return int(os.environ.get("WORLD_SIZE") or env_from_slurm(dict(os.environ)).get("WORLD_SIZE") or 1)


def backend(device: torch.device) -> str:
    """The backend: on CUDA, NCCL for CUDA tensors and gloo for the CPU ones, which NCCL alone cannot serve."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def process_device(trainer_cfg) -> torch.device:
    """The device the launcher's variables place this process on (cuda:LOCAL_RANK), the one init sets."""
    return rank_device(trainer_cfg.device, launched_world_size(), env_local_rank())


def init(trainer_cfg) -> World:
    """The process group torchrun (or SLURM) describes; World() when the job is one process."""
    os.environ.update(env_from_slurm(dict(os.environ)))
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    local_rank = env_local_rank()
    if not dist.is_initialized():  # the config was checked by rlx.config.preflight (trainer.strategy, dist_timeout_s)
        device = process_device(trainer_cfg)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend(device), timeout=timedelta(seconds=float(trainer_cfg.dist_timeout_s)))
    return World(dist.get_rank(), dist.get_world_size(), local_rank)


# rank 0's build of the policy (`main_first`: an SFT stage, a CPU quantization) may take hours
BUILD_TIMEOUT_S = 24 * 3600.0


def main_first(world: World, build, timeout_s: float = BUILD_TIMEOUT_S):
    """`build()` on rank 0, then the others (finding its caches), waiting on their own gloo group with `timeout_s`."""
    if not world.distributed:
        return build()
    wait = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
    try:
        out = build() if world.is_main else None
        dist.barrier(group=wait)
        if not world.is_main:
            out = build()
        dist.barrier(group=wait)  # every rank built: the run's own collectives (and their timeout) start
    finally:
        dist.destroy_process_group(wait)
    return out


def join(trainer_cfg, run_dir):
    """init(), and the run directory every rank uses: rank 0's; other ranks log only warnings and errors."""
    from pathlib import Path

    world = init(trainer_cfg)
    shared = Path(world.broadcast(str(run_dir)))
    if shared != Path(run_dir):
        try:
            Path(run_dir).rmdir()  # empty: rank > 0 writes no Hydra files (conf/config.yaml, rlx_rank0)
        except OSError:
            pass
    if not world.is_main:  # one console
        import logging

        logging.getLogger("rlx").setLevel(logging.WARNING)
    return world, shared


def close(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


def check_agreement(world: World, value: float, what: str) -> None:
    """Raise, on every rank, when ranks hold different `value`s (weights that must be replicas)."""
    if not world.distributed:
        return
    vals = world.gather(value)
    if len(set(vals)) > 1:
        raise RuntimeError(f"ranks diverged: {what} differs across ranks {vals}; the replicas no longer hold the "
                           f"same weights (a non-deterministic op on one rank?)")
