"""Where each local vLLM server runs (`rollout.server.placement`, one entry each): `cpu:<cores>` pins its process
group, `cuda:<ids>` sets its CUDA_VISIBLE_DEVICES (several: tensor parallel); empty: they share the machine."""

from __future__ import annotations

import os

from rlx.rollout.config import parse_placement as parse

CPUS_ENV = "RLX_SERVER_CPUS"  # read by the server's watchdog, which pins itself (and so the server) to them


def check_machine(entries: list[str]) -> None:
    """The cores / GPUs the entries name exist for this process; ValueError naming the first that does not."""
    for entry in entries:
        kind, ids = parse(entry)
        if kind == "cpu":
            if not hasattr(os, "sched_getaffinity"):
                raise ValueError(f"rollout.server.placement: '{entry}': CPU placement needs Linux CPU affinity")
            allowed = sorted(os.sched_getaffinity(0))
            missing = [i for i in ids if i not in allowed]
            if missing:
                raise ValueError(f"rollout.server.placement: '{entry}' names cores {missing} this process may not "
                                 f"use (allowed: {allowed})")
        else:
            import torch

            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            missing = [i for i in ids if i >= count]
            if missing:
                raise ValueError(f"rollout.server.placement: '{entry}' names GPUs {missing}; this machine has "
                                 f"{count} CUDA device(s)")


def server_env(entry: str | None, env: dict) -> dict:
    """A copy of `env` placing one server: its cores (for the watchdog) or visible GPUs (mapped through ours)."""
    env = dict(env)
    if entry:
        kind, ids = parse(entry)
        if kind == "cpu":
            env[CPUS_ENV] = ",".join(map(str, ids))
        else:
            visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[i] if visible else str(i) for i in ids)
    return env


def tensor_parallel(entry: str | None) -> int:
    """The tensor-parallel size of a server placed on `entry`: its GPU count (1 on CPU or unplaced)."""
    if not entry:
        return 1
    kind, ids = parse(entry)
    return len(ids) if kind == "cuda" else 1


def gpu_share(entry: str | None, entries: list[str | None], fraction: float) -> float:
    """A local server's --gpu-memory-utilization: `fraction` split among the servers on its GPUs (unplaced: the
    first), since vLLM checks at start-up that this share of the whole GPU is free."""
    def gpus(e: str | None) -> set[int]:
        if not e:
            return {0}
        kind, ids = parse(e)
        return set(ids) if kind == "cuda" else {0}

    mine = gpus(entry)
    sharing = sum(1 for e in entries if gpus(e) & mine)
    return fraction / max(1, sharing)
