"""Colocated vLLM under torchrun (issue 57, failure 3): each rank's engine on its own GPU.

vLLM's default (uni-process) executor takes the worker's local rank from the device string, `cuda`, so
every rank's engine ran on cuda:0. With `distributed_executor_backend="external_launcher"` (what rlx now
passes on a GPU when world size > 1) the executor reads torchrun's LOCAL_RANK, and vLLM's GPU worker then
makes cuda:LOCAL_RANK its device. These tests run vLLM's own executor and GPU worker code on the config
built from rlx's keywords; stubs: torch.accelerator's device count and set_device_index (what the worker
asks torch about the GPUs; the latter stops the worker at the device it picked), and the DeviceConfig the
CUDA platform would have built (the CPU build's platform builds a CPU one).

The two-process test checks the premise: vLLM's external launcher joins the process group rlx already
initialised (it does not make its own) and, with one engine per rank, gives each rank a tensor-parallel
group of its own (vLLM's "external data parallel" layout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]


def tiny_model_dir(path: Path) -> Path:
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, max_position_embeddings=128).save_pretrained(path)
    return path


def rlx_engine_config(model_dir: Path, world_size: int):
    """vLLM's config for the colocated engine rlx builds on a GPU in a job of `world_size` ranks."""
    from vllm.engine.arg_utils import EngineArgs

    from rlx.rollout.config import RolloutConfig
    from rlx.rollout.vllm_setup import engine_kwargs

    cfg = OmegaConf.structured(RolloutConfig(engine="vllm"))
    kw = engine_kwargs(cfg, model_dir, dtype=torch.bfloat16, max_model_len=64, seed=0, on_cpu=False,
                       world_size=world_size)
    return EngineArgs(**kw).create_engine_config()


class _Stop(Exception):
    pass


def worker_device(vllm_config, monkeypatch, gpus: int = 8) -> str:
    """The CUDA device vLLM's GPU worker makes current for this config, on a node with `gpus` GPUs."""
    from vllm.v1.executor.abstract import Executor
    from vllm.v1.worker.gpu_worker import Worker

    vllm_config.device_config.device_type = "cuda"  # what the CUDA platform builds from device="auto"
    vllm_config.device_config.device = torch.device("cuda")
    executor = Executor.get_class(vllm_config)
    init_method, rank, local_rank = executor._distributed_args(SimpleNamespace(vllm_config=vllm_config))

    def stop(device):
        raise _Stop(str(device))

    monkeypatch.setattr(torch.accelerator, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.accelerator, "set_device_index", stop)
    precision = torch.get_float32_matmul_precision()  # the worker sets vLLM's
    try:
        worker = Worker(vllm_config=vllm_config, local_rank=local_rank, rank=rank, distributed_init_method=init_method,
                        is_driver_worker=True)
        with pytest.raises(_Stop) as stopped:
            worker.init_device()
    finally:
        torch.set_float32_matmul_precision(precision)
    return stopped.value.args[0]


@pytest.mark.parametrize("rank,local_rank", [(1, 1), (3, 3), (5, 1)], ids=["rank1", "rank3", "node2-rank5"])
def test_each_ranks_engine_runs_on_its_own_gpu(tmp_path, monkeypatch, rank, local_rank):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # rlx's colocated engine (rlx.rollout.vllm)
    for key, value in (("RANK", rank), ("LOCAL_RANK", local_rank), ("WORLD_SIZE", 8), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "29500")):
        monkeypatch.setenv(key, str(value))
    model = tiny_model_dir(tmp_path)
    config = rlx_engine_config(model, world_size=8)
    assert config.parallel_config.world_size == 1  # one engine per rank, no tensor parallelism
    assert worker_device(config, monkeypatch) == f"cuda:{local_rank}"
    # vLLM's default executor, what rlx passed before: every rank's engine on GPU 0
    from vllm.engine.arg_utils import EngineArgs

    default = EngineArgs(model=str(model), skip_tokenizer_init=True, dtype="bfloat16", max_model_len=64)
    assert worker_device(default.create_engine_config(), monkeypatch) == "cuda:0"


def test_one_process_keeps_vllms_default_executor(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    config = rlx_engine_config(tiny_model_dir(tmp_path), world_size=1)
    assert config.parallel_config.distributed_executor_backend == "uni"


RANK_SCRIPT = r"""
import json, os, sys
import torch, torch.distributed as dist
sys.path.insert(0, sys.argv[2])
from tests.gpu_contract.test_vllm_torchrun import rlx_engine_config
from pathlib import Path
dist.init_process_group("gloo")  # the group rlx's World initialises first (gloo for CPU tensors)
config = rlx_engine_config(Path(sys.argv[1]), world_size=dist.get_world_size())
from vllm.config import set_current_vllm_config
from vllm.distributed import parallel_state as ps
with set_current_vllm_config(config):
    ps.init_distributed_environment(config.parallel_config.world_size, dist.get_rank(), "env://",
                                    int(os.environ["LOCAL_RANK"]), backend="gloo")
    ps.ensure_model_parallel_initialized(1, 1)
    print("RESULT " + json.dumps({"world": ps.get_world_group().ranks, "tp": ps.get_tp_group().ranks,
                                  "pp": ps.get_pp_group().ranks}))
dist.destroy_process_group()
"""


@pytest.mark.integration
def test_external_launcher_joins_rlxs_process_group_one_engine_per_rank(tmp_path):
    from rlx.rollout.server.pool import free_port

    model = tiny_model_dir(tmp_path)
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(model), str(ROOT)], cwd=ROOT,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    results = []
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
        results.append(json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:]))
    for rank, got in enumerate(results):
        assert got["world"] == [0, 1]  # rlx's two ranks, not a group of vLLM's own
        assert got["tp"] == [rank] and got["pp"] == [rank]  # each rank's engine is whole on its own GPU
