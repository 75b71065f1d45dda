"""Data parallelism over torch.distributed (launched by torchrun): the process group, prompt shards, and
the few collectives the loop needs. `-m rlx.train` alone is one process and touches none of this.

How an RL step runs on N ranks (docs/cluster.md):
- every rank draws the same prompts (same seeds, same task state) and the same per-row sampling seeds;
  rank r generates only its contiguous share of the prompts (groups stay on one rank), then the
  batches are all-gathered, so every rank holds the whole global batch, in prompt order;
- rewards, batch shaping, advantages and the full-batch token weights are computed on that global
  batch (identical on every rank by construction);
- the update's micro-batches are dealt out round-robin; each rank backpropagates its own, and the
  gradients are summed across ranks by torch's DDP (`trainer.strategy=ddp`: replicated weights) or
  FSDP2 (`fsdp`: `fully_shard` on every decoder layer), so the optimizer step is the one a single
  process would take on the same global batch (up to float summation order);
- rank 0 alone writes metrics.jsonl, summary.json, wandb and checkpoints; every rank resumes from them.

Collectives time out after `trainer.dist_timeout_s`; a rank that raises ends the run through torchrun,
which names the failed rank and its traceback (rlx.train's main is wrapped in torchrun's `record`).
"""

from __future__ import annotations

import math
import os
import subprocess
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from rlx.run.device import STRATEGIES, rank_device  # noqa: F401  (STRATEGIES: re-exported)


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
    """torch.distributed's env:// variables from SLURM's, for jobs whose tasks are the ranks (one SLURM
    task per device, as `hydra/launcher=submitit_slurm_ddp` starts them) rather than torchrun workers.
    Returns the variables to set ({} when torchrun's are present, or outside an `srun` step of several
    tasks: a plain `python -m rlx.train` in an allocation of many tasks is one process, not rank 0 of N)."""
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
    """The process group's backend for ranks that compute on `device`. On CUDA, NCCL serves the CUDA
    tensors (DDP's and FSDP's gradients) and gloo the CPU ones: the loop all-reduces CPU statistics
    (`DataParallel.reduce_stats`) and gathers pickled batches, and NCCL alone has no backend for cpu."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


def process_device(trainer_cfg) -> torch.device:
    """The device this process computes on, as the launcher's variables (torchrun's or SLURM's) place it: the
    rule `rlx.run.device.resolve` applies (one GPU per rank, cuda:LOCAL_RANK), so the current CUDA device
    init sets is the one the model, DDP and the engine use."""
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


# how long the other ranks wait for rank 0 to build the policy (`main_first`): an SFT stage on a cache miss,
# a base loaded and quantized on the CPU, may take hours; a rank 0 that fails ends them at once (torchrun)
BUILD_TIMEOUT_S = 24 * 3600.0


def main_first(world: World, build, timeout_s: float = BUILD_TIMEOUT_S):
    """`build()` on rank 0, then on the other ranks (which find what rank 0 cached: the SFT base, a converted
    model), each rank's result returned. The waits run on a gloo group of their own whose timeout is
    `timeout_s`, not `trainer.dist_timeout_s`: a collective's timeout would end the waiting ranks while rank 0
    still builds."""
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
    """init(), and the run directory every rank uses: rank 0's. (Each rank's Hydra named one from its own
    clock; the others', left empty, are removed.) Ranks other than 0 log only warnings and errors."""
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


class ShardedEngine:
    """A rollout engine for one rank of N: it samples this rank's share of the prompts and returns the
    whole batch (all ranks' shares, all-gathered, rows in prompt order). Each row's sampling seed is
    drawn for the global batch, so the samples do not depend on how the prompts were split: N ranks
    sample what one process would. Everything else is the wrapped engine's."""

    def __init__(self, engine, world: World, gathered=nullcontext):
        self.__dict__.update(engine=engine, world=world, gathered=gathered)

    def __getattr__(self, name):
        return getattr(self.__dict__["engine"], name)

    def __setattr__(self, name, value):
        setattr(self.engine, name, value)

    def generate(self, prompts, n, sampling, generator, seeds=None):
        from rlx.rollout.base import RolloutBatch, draw_seeds

        seeds = draw_seeds(generator, len(prompts) * n) if seeds is None else list(seeds)
        sl = self.world.shard(len(prompts))
        local = None
        if sl.stop > sl.start:
            with self.gathered():  # fsdp: whole layers while this rank decodes at its own pace
                local = self.engine.generate(prompts[sl], n, sampling, generator, seeds=seeds[sl.start * n: sl.stop * n])
            local.group = local.group + sl.start  # prompt ids of the global batch
        parts = [b for b in self.world.gather(local) if b is not None]
        return RolloutBatch.concat(parts, self.engine.tok.pad_token_id)

    def metrics(self) -> dict:
        """The wrapped engine's; an engine that counts what each rank generated (episodes: rlx.envs) is given
        the gather, so its counts cover the whole batch as one process's would. Every rank calls this."""
        if getattr(self.engine, "gathers_metrics", False):
            return self.engine.metrics(gather=self.world.gather)
        return self.engine.metrics()


class DataParallel:
    """This rank's part of an update: which micro-batches it computes, the module its forward runs
    through, and how its gradients meet the other ranks'. One process: every micro-batch, the policy
    itself, nothing to reduce (bitwise the single-process update)."""

    def __init__(self, policy, world: World, strategy: str = "ddp", device: torch.device | None = None):
        self.world, self.strategy = world, strategy
        self.decoder = None  # the update's forward goes through this (DDP wrapper) when set
        self.loss_scale = 1.0
        self._layers: list = []
        self._extra: list[torch.nn.Parameter] = []
        if not world.distributed:
            return
        from rlx.models.forward import causal_lm  # (a higher package, and heavy: only where a model is wrapped)

        lm = causal_lm(policy)
        inside = {id(q) for q in lm.model.parameters()}
        # trainable tensors outside the decoder (a trainable head: full fine-tuning) are reduced by hand
        self._extra = [q for q in policy.parameters() if q.requires_grad and id(q) not in inside]
        if strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index if device.index is not None else world.local_rank] if device is not None and device.type == "cuda" else None
            import inspect

            # buffers (packed quantized bases) are frozen replicas: never re-broadcast them every forward
            quiet = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                     else {"broadcast_buffers": False})
            self.decoder = DistributedDataParallel(lm.model, device_ids=ids, **quiet)
        elif strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for layer in lm.model.layers:  # embeddings, final norm and head stay whole (replicated)
                fully_shard(layer)
            self._layers = list(lm.model.layers)
        else:
            raise ValueError(f"trainer.strategy: '{strategy}' is not one of {list(STRATEGIES)}")
        # DDP and FSDP average gradients over ranks; each rank's loss is its share of ONE global sum
        # (the token weights come from the full batch), so the sum is what the single process computes
        self.loss_scale = float(world.size)

    def assign(self, micro: list) -> list[tuple[object, bool]]:
        """(micro-batch, live) pairs for this rank: micro[rank::size], padded with dead repeats (loss x 0)
        so every rank runs the same number of forwards and backwards (DDP's last synced backward and
        FSDP's per-layer all-gathers are collectives)."""
        if not self.world.distributed:
            return [(mb, True) for mb in micro]
        count = math.ceil(len(micro) / self.world.size)
        mine = [(mb, True) for mb in micro[self.world.rank:: self.world.size]]
        return mine + [(micro[0], False)] * (count - len(mine))

    def backward(self, loss: torch.Tensor, live: bool) -> None:
        """Backpropagate this rank's share of the global loss (scaled: DDP/FSDP average over ranks). A dead
        repeat from `assign` backpropagates zero through its graph: the others' collectives, no gradient."""
        (loss * (self.loss_scale if live else 0.0)).backward()

    def sync_after(self, last: bool):
        """DDP: gradients are all-reduced in the backward of the pass's last micro-batch only."""
        if self.strategy == "ddp" and self.decoder is not None and not last:
            return self.decoder.no_sync()
        return nullcontext()

    def reduce_grads(self) -> None:
        """Reduce the gradients DDP/FSDP do not see (trainable tensors outside what they wrap) as they
        reduce theirs: the mean over ranks of the loss_scale-scaled gradients, i.e. their sum unscaled."""
        for q in self._extra:
            if q.grad is None:
                q.grad = torch.zeros_like(q)
            self.world.all_reduce(q.grad).div_(self.loss_scale)

    def reduce_stats(self, sums: dict[str, float], maxes: dict[str, float]) -> tuple[dict, dict]:
        """Sums and maxes of per-rank statistics over ranks (metric accumulators, token counts)."""
        if not self.world.distributed:
            return sums, maxes
        names = self.world.gather((sorted(sums), sorted(maxes)))  # a rank with no live micro-batch has none
        ks, km = sorted({k for a, _ in names for k in a}), sorted({k for _, b in names for k in b})
        s = self.world.all_reduce(torch.tensor([sums.get(k, 0.0) for k in ks], dtype=torch.float64))
        m = self.world.all_reduce(torch.tensor([maxes.get(k, -math.inf) for k in km] + [0.0], dtype=torch.float64),
                                  op="max")
        return dict(zip(ks, s.tolist())), dict(zip(km, m.tolist()))

    @contextmanager
    def gathered(self):
        """fsdp: every layer whole (all-gathered once) and kept whole through many forwards, so ranks
        may decode different numbers of tokens; resharded after. Anything else: nothing to do."""
        if not self._layers:
            yield
            return
        for layer in self._layers:
            layer.set_reshard_after_forward(False)
            layer.unshard()
        try:
            yield
        finally:
            for layer in self._layers:
                layer.reshard()
                layer.set_reshard_after_forward(True)

    # --- checkpoints: FSDP holds shards, a checkpoint holds whole tensors (collectives: every rank calls) ----
    @property
    def sharded(self) -> bool:
        return bool(self._layers)

    def gathered_trainable(self, policy) -> dict[str, torch.Tensor] | None:
        """fsdp: the whole trainable tensors, by parameter name (what the adapter file holds); else None
        (the checkpoint reads the module itself)."""
        if not self.sharded:
            return None
        return {n: (q.full_tensor() if hasattr(q, "full_tensor") else q).detach().cpu()
                for n, q in policy.named_parameters() if q.requires_grad}

    def optimizer_state(self, policy, opt) -> dict:
        """The optimizer's state to checkpoint (fsdp: gathered whole on rank 0, keyed by parameter name)."""
        if not self.sharded:
            return opt.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(policy, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_optimizer_state(self, policy, opt, state: dict) -> None:
        if not self.sharded:
            opt.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(policy, opt, optim_state_dict=state, options=StateDictOptions(full_state_dict=True))

    def checksum(self, policy, whole: dict[str, torch.Tensor] | None = None) -> float:
        """A number that differs between ranks whose trainable weights differ (checked at every checkpoint).
        `whole`: what gathered_trainable returned, when the caller has it (fsdp: gathered once, not twice)."""
        whole = whole or self.gathered_trainable(policy) or {n: q for n, q in policy.named_parameters() if q.requires_grad}
        total = torch.zeros((), dtype=torch.float64)
        for i, name in enumerate(sorted(whole)):
            total += (i + 1) * whole[name].detach().double().sum().cpu()
        return float(total)


def check_agreement(world: World, value: float, what: str) -> None:
    """Raise, on every rank, when ranks hold different `value`s (weights that must be replicas)."""
    if not world.distributed:
        return
    vals = world.gather(value)
    if len(set(vals)) > 1:
        raise RuntimeError(f"ranks diverged: {what} differs across ranks {vals}; the replicas no longer hold the "
                           f"same weights (a non-deterministic op on one rank?)")
