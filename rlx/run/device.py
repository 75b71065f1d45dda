"""Devices: resolve `trainer.device` / `dtype` / `threads` once, before any work (docs/engine.md, "Devices").
Forwards run under `autocast(trainer)`, a no-op in fp32; `trainer.dtype=auto` is recorded resolved."""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass

import numpy as np
import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DTYPE_CHOICES = ("auto", *DTYPES)  # trainer.dtype


@dataclass(frozen=True)
class DeviceSpec:
    """Where and in what dtype the run computes, resolved from the `trainer` config group."""

    device: torch.device
    dtype: torch.dtype  # compute dtype of forward passes (autocast); parameters keep theirs
    world_size: int = 1  # data-parallel processes (torchrun), one device each
    dtype_why: str = ""  # how `dtype` was chosen ("set", or what trainer.dtype=auto saw)

    @property
    def dtype_name(self) -> str:
        """`dtype` as trainer.dtype spells it (fp32 | bf16)."""
        return next(k for k, v in DTYPES.items() if v == self.dtype)

    @property
    def num_devices(self) -> int:
        """Devices the run computes on, all ranks (for perf/compute/gpu_hours = devices x wall hours)."""
        return self.world_size


STRATEGIES = ("ddp", "fsdp")  # trainer.strategy (rlx.algo.data_parallel.DataParallel)


def resolve(cfg, world_size: int = 1, local_rank: int = 0) -> DeviceSpec:
    """The DeviceSpec for a `trainer` config; ValueError naming the key before any work."""
    dev = rank_device(cfg.device, world_size, local_rank)
    if cfg.strategy not in STRATEGIES:
        raise ValueError(f"trainer.strategy: '{cfg.strategy}' is not one of {list(STRATEGIES)}")
    if cfg.dist_timeout_s <= 0:
        raise ValueError(f"trainer.dist_timeout_s must be > 0, got {cfg.dist_timeout_s}")
    if cfg.dtype not in DTYPE_CHOICES:
        raise ValueError(f"trainer.dtype: '{cfg.dtype}' is not one of {list(DTYPE_CHOICES)}")
    dtype, why = auto_dtype(dev) if cfg.dtype == "auto" else (cfg.dtype, "set")
    if dev.type == "cpu" and cfg.dtype == "bf16" and not cpu_bf16_flags():
        from rlx.run.logging import say

        say("[warn] trainer.dtype=bf16 on a CPU without bf16 instructions (avx512_bf16, amx_bf16): bf16 matmuls are emulated here, "
            "several times slower than fp32 (`python -m benchmarks.dtype` measures it; docs/lean.md); "
            "trainer.dtype=auto would pick fp32 here")
    if cfg.threads < -1:
        raise ValueError(f"trainer.threads must be -1 (auto: the free cores, rlx.run.threads), 0 (torch's default) "
                         f"or N >= 1, got {cfg.threads}")
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    from rlx.run.allocator import set_mmap_threshold

    set_mmap_threshold(float(cfg.get("malloc_mmap_threshold_mb", 0.0)))
    return DeviceSpec(dev, DTYPES[dtype], world_size, why)


def rank_device(device: str, world_size: int = 1, local_rank: int = 0) -> torch.device:
    """The device `trainer.device` means here: cuda:LOCAL_RANK under torchrun / SLURM (there cuda:N is refused)."""
    dev = str(device)
    if dev not in ("auto", "cpu", "cuda") and not dev.startswith("cuda:"):
        raise ValueError(f"trainer.device: '{dev}' is not auto, cpu, cuda or cuda:N")
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"trainer.device={dev}: this machine has no CUDA device (torch {torch.__version__}, "
                         f"torch.cuda.is_available() is False); use trainer.device=cpu or auto")
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    if world_size > 1 and dev.startswith("cuda:"):
        raise ValueError(f"trainer.device={dev} with {world_size} ranks (torchrun / SLURM): every rank would compute on "
                         f"that one GPU. Use trainer.device=cuda (or auto): each rank takes cuda:LOCAL_RANK, its own GPU "
                         f"of the node; choose which GPUs with CUDA_VISIBLE_DEVICES")
    if dev == "cuda" and world_size > 1:
        dev = f"cuda:{local_rank}"
    if dev.startswith("cuda:") and int(dev.split(":")[1]) >= torch.cuda.device_count():
        where = f"LOCAL_RANK {local_rank}" if world_size > 1 else f"trainer.device={dev}"
        raise ValueError(f"{where}: this process sees {torch.cuda.device_count()} CUDA device(s) (CUDA_VISIBLE_DEVICES="
                         f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}), so it has no {dev}"
                         + ("; start at most that many ranks per node (torchrun --nproc_per_node)" if world_size > 1 else ""))
    return torch.device(dev)


def auto_dtype(device) -> tuple[str, str]:
    """(fp32 | bf16, why) `trainer.dtype=auto` picks on `device`: bf16 where it is native, else fp32."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16", "auto: a GPU with bf16"
        return "fp32", "auto: a GPU without bf16 (compute capability < 8.0)"
    flags = cpu_bf16_flags()
    if flags == ["unknown"]:
        return "fp32", "auto: a CPU whose bf16 instructions cannot be read (no /proc/cpuinfo)"
    if flags:
        return "bf16", f"auto: a CPU with {'/'.join(flags)}"
    return "fp32", "auto: a CPU without bf16 instructions (avx512_bf16, amx_bf16, aarch64 bf16)"


def cpu_bf16_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The CPU's native bf16 instruction sets in /proc/cpuinfo ([] if none, ["unknown"] where unreadable)."""
    try:
        with open(cpuinfo) as f:
            words = set(f.read().split())
    except OSError:
        return ["unknown"]
    return [flag for flag in ("avx512_bf16", "amx_bf16", "bf16") if flag in words]  # bf16: aarch64


def autocast(trainer: DeviceSpec):
    """Forward-pass context: bf16 autocast on the trainer's device, nothing at all in fp32."""
    if trainer.dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=trainer.device.type, dtype=trainer.dtype)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


def rng_state() -> dict:
    s = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        s["cuda"] = torch.cuda.get_rng_state_all()
    return s


def set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    if "cuda" in s:
        if not torch.cuda.is_available():
            raise RuntimeError("checkpoint holds CUDA RNG state but this machine has no CUDA device; "
                               "resume it with trainer.device=cuda on a GPU machine")
        torch.cuda.set_rng_state_all(s["cuda"])
