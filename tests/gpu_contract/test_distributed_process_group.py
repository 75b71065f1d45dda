"""The process group a CUDA run builds serves the CPU tensors the loop reduces (issue 57, failure 1).

NCCL serves CUDA tensors only: a group built as plain `nccl` has no backend for the device type cpu,
and `DataParallel.reduce_stats` all-reduces CPU float64 statistics at every update. The contract is
checked with two real ranks on 127.0.0.1, gloo standing in for NCCL on the cuda side of the very backend
string `rlx.run.distributed.init` passes to torch for a CUDA device (a backend registered for cuda
alone refuses a CPU tensor exactly as NCCL does)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlx.run.distributed import backend

ROOT = Path(__file__).resolve().parents[2]

# one rank: the group `backend` names, then the collectives the loop runs on CPU objects and tensors
RANK = r"""
import json, math, os, sys
from datetime import timedelta
import torch, torch.distributed as dist
from rlx.algo.data_parallel import DataParallel
from rlx.run.distributed import World

rank = int(os.environ["RANK"])
dist.init_process_group(sys.argv[1], timeout=timedelta(seconds=15))
world = World(rank, 2, 0)
dp = DataParallel(None, World())  # built for one process (no model needed), then given the two-rank world
dp.world = world
out = {}
try:
    out["all_reduce"] = world.all_reduce(torch.tensor([1.0, float(rank)], dtype=torch.float64)).tolist()  # as reduce_stats
    sums = {"loss": 1.5, "tokens": 10.0} if rank == 0 else {"loss": 2.25}
    maxes = {"ratio": 3.0} if rank == 0 else {"ratio": 5.0, "kl": 0.5}
    out["stats"] = dp.reduce_stats(sums, maxes)
    out["gather"] = world.gather(rank * 10)
    out["broadcast"] = world.broadcast(f"from {rank}")
    world.barrier()
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps(out), flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_ranks(script: str, *args: str, timeout: float = 60) -> list[dict]:
    """Run `script` as ranks 0 and 1 of a group rendezvousing on 127.0.0.1; each rank's RESULT line."""
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", script, *args], env={**env, "RANK": str(r), "LOCAL_RANK": "0"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
        assert line is not None, f"rank exited {p.returncode} without a result:\n{out[-2000:]}\n{err[-4000:]}"
        results.append(json.loads(line.removeprefix("RESULT ")))
    return results


def gloo_for_nccl(spec: str) -> str:
    """The same per-device backends with gloo wherever NCCL would serve (plain `nccl` is torch's cuda:nccl)."""
    pairs = [p if ":" in p else ("cuda:nccl" if p == "nccl" else f"cpu:{p},cuda:{p}") for p in spec.split(",")]
    return ",".join(p.replace("nccl", "gloo") for p in pairs)


@pytest.mark.integration
def test_a_backend_for_cuda_alone_refuses_the_cpu_statistics():
    """The failure as NCCL alone shows it: no backend for cpu tensors (and for CPU object collectives)."""
    for r in two_ranks(RANK, "cuda:gloo"):
        assert "No backend type associated with device type cpu" in r["error"]


@pytest.mark.integration
def test_the_group_rlx_builds_for_cuda_reduces_cpu_statistics():
    spec = backend(torch.device("cuda"))
    assert "nccl" in spec  # CUDA tensors (DDP's gradient buckets) still go through NCCL
    got = two_ranks(RANK, gloo_for_nccl(spec))
    for r in got:
        assert "error" not in r, r
        sums, maxes = r["stats"]
        assert sums == {"loss": 1.5 + 2.25, "tokens": 10.0}  # a key one rank lacks counts 0 there
        assert maxes == {"kl": 0.5, "ratio": 5.0}
        assert r["all_reduce"] == [2.0, 1.0] and r["gather"] == [0, 10] and r["broadcast"] == "from 0"
    assert backend(torch.device("cpu")) == "gloo"


@pytest.mark.parametrize("spec,want", [("nccl", "cuda:gloo"), ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:gloo"),
                                       ("gloo", "cpu:gloo,cuda:gloo")])
def test_the_stand_in_keeps_the_devices_each_backend_serves(spec, want):
    assert gloo_for_nccl(spec) == want
