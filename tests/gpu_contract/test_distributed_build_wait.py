"""The other ranks wait for rank 0's build (issue 57): rank 0 builds the warm start (an SFT stage on a
cache miss) and loads and quantizes the base on the CPU while the others wait. They waited in a barrier of
the run's process group, which ends them after `trainer.dist_timeout_s` (600 s); `main_first` waits on a
group of its own sized for a build. Two real gloo ranks on 127.0.0.1, a group timeout of 2 s and a build
of 6 s."""

from __future__ import annotations

import pytest

from tests.gpu_contract.test_distributed_process_group import two_ranks

pytestmark = pytest.mark.integration

RANK = r"""
import json, os, sys, time
from datetime import timedelta
import torch.distributed as dist
from rlx.run.distributed import World, main_first

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=timedelta(seconds=2))  # trainer.dist_timeout_s=2
world = World(rank, 2, 0)
built = []

def build():  # rank 0 builds and caches for 6 s, the others find its cache
    if rank == 0:
        time.sleep(6)
    built.append((rank, time.time()))
    return f"policy of rank {rank}"

out = {}
try:
    if sys.argv[1] == "barrier":  # what rlx.train did: rank 0 builds, the others wait in the run's barrier
        for turn in (0, 1):
            if (turn == 0) == world.is_main:
                out["policy"] = build()
            world.barrier()
    else:
        out["policy"] = main_first(world, build)
        out["after"] = world.gather(rank)  # the run's collectives work after the long wait
    out["built_at"] = built[0][1]
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps(out), flush=True)
"""


def test_a_build_longer_than_the_collective_timeout_ends_the_waiting_ranks_in_a_barrier():
    r0, r1 = two_ranks(RANK, "barrier")
    assert "error" in r1 and "imed out" in r1["error"]  # gloo: "Timed out waiting ... for recv operation"


def test_the_others_wait_for_rank_0s_build_and_build_after_it():
    r0, r1 = two_ranks(RANK, "main_first")
    assert "error" not in r0 and "error" not in r1, (r0, r1)
    assert r0["policy"] == "policy of rank 0" and r1["policy"] == "policy of rank 1"
    assert r1["built_at"] >= r0["built_at"]  # rank 1 built only once rank 0 had (its cache exists by then)
    assert r0["after"] == r1["after"] == [0, 1]
