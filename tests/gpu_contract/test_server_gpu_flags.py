"""Local vLLM servers on a GPU (issue 57, failure 4): sized by a fraction of the GPU, not by host RAM.

A server got `--kv-cache-memory-bytes` from the CPU's work-sized plan and never `--gpu-memory-utilization`,
so vLLM's start-up check still wanted its default share (0.92) of the GPU free: no server could start
beside the trainer, nor a second server on the same GPU. The argv rlx builds is parsed here by vLLM's own
server parser into EngineArgs, and the fraction it carries is put through vLLM's own start-up check
(`request_memory`) on a simulated 80 GiB GPU, each server in turn seeing what the ones before it took."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

GiB = 1 << 30
TOTAL = 80 * GiB  # one H100
TRAINER = 20 * GiB  # what the trainer holds on that GPU when the servers start


def engine_args(cmd: list[str]):
    """What `python -m vllm.entrypoints.openai.api_server <argv>` builds its engine from."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    return EngineArgs.from_cli_args(make_arg_parser(FlexibleArgumentParser()).parse_args(cmd[3:]))


def start_on_one_gpu(fractions: list[float]) -> list[int]:
    """vLLM's start-up memory check for servers started one after another on one GPU beside the trainer:
    the bytes each one requests; ValueError (vLLM's) when one does not fit."""
    from vllm.config import CacheConfig
    from vllm.utils.mem_utils import MemorySnapshot
    from vllm.v1.worker.utils import request_memory

    taken, out = TRAINER, []
    for f in fractions:
        snap = MemorySnapshot(total_memory=TOTAL, free_memory=TOTAL - taken, device="cuda:0", auto_measure=False)
        out.append(request_memory(snap, CacheConfig(gpu_memory_utilization=f)))
        taken += out[-1]
    return out


def rollout(**server):
    from rlx.rollout.config import RolloutConfig

    cfg = OmegaConf.structured(RolloutConfig)
    cfg.engine = "vllm_server"
    cfg.server = OmegaConf.merge(cfg.server, server)
    return cfg


def commands(cfg, on_cpu: bool, kv_plan=None) -> list[list[str]]:
    """The argv of every local server of a run with rollout config `cfg`."""
    from rlx.rollout.server.engine import command_maker

    make = command_maker(cfg, "/m", on_cpu=on_cpu, dtype="bfloat16", seed=0, max_model_len=512, lora_rank=16,
                         kv_plan=kv_plan)
    entries = list(cfg.server.placement) or [None] * int(cfg.server.num)
    return [make(8000 + i, entry) for i, entry in enumerate(entries)]


def test_two_servers_start_beside_the_trainer_on_one_gpu():
    cfg = rollout(num=2)  # unplaced: both on the trainer's GPU; rollout.vllm.gpu_memory_utilization 0.3 in all
    args = [engine_args(c) for c in commands(cfg, on_cpu=False)]
    assert [a.gpu_memory_utilization for a in args] == [0.15, 0.15]
    assert all(a.kv_cache_memory_bytes is None for a in args)  # vLLM profiles the GPU and sizes the cache itself
    assert not any(a.enforce_eager for a in args)  # enforce_eager=auto: CUDA graphs on a GPU
    requested = start_on_one_gpu([a.gpu_memory_utilization for a in args])
    assert sum(requested) <= 0.3 * TOTAL + 2  # together no more than the configured share (ceil per server)
    # the command rlx built before: host-RAM-sized cache and no fraction, so vLLM wants its default 0.92 free
    from rlx.rollout.server.pool import server_command

    before = engine_args(server_command("/m", 8000, lora_rank=16, max_model_len=512, dtype="bfloat16", seed=0,
                                        max_num_seqs=256, kv_cache_bytes=4 * GiB))
    with pytest.raises(ValueError, match="Free memory on device"):
        start_on_one_gpu([before.gpu_memory_utilization])


def test_servers_on_gpus_of_their_own_each_take_the_whole_share():
    cfg = rollout(num=3, placement=["cuda:1", "cuda:2,3", "cuda:1"])  # two share GPU 1, one is tensor-parallel
    cfg.vllm.gpu_memory_utilization = 0.9
    args = [engine_args(c) for c in commands(cfg, on_cpu=False)]
    assert [a.gpu_memory_utilization for a in args] == [0.45, 0.9, 0.45]
    assert args[1].tensor_parallel_size == 2


def test_cpu_servers_keep_the_work_sized_cache_and_eager_mode():
    from rlx.rollout.kv_sizing import plan_kv_cache

    plan = plan_kv_cache(0.0, batch=64, seq_tokens=256, per_token=2048, max_num_seqs=256, available=64 * GiB)
    (args,) = [engine_args(c) for c in commands(rollout(num=1), on_cpu=True, kv_plan=plan)]
    assert args.kv_cache_memory_bytes == plan.bytes and args.enforce_eager
    assert args.max_num_seqs == plan.concurrency


@pytest.mark.parametrize("value,on_cpu,eager", [("true", False, True), ("false", True, False), ("auto", True, True)])
def test_enforce_eager_from_the_config_wins(value, on_cpu, eager):
    from rlx.rollout.kv_sizing import plan_kv_cache

    cfg = rollout(num=1)
    cfg.vllm.enforce_eager = value
    plan = plan_kv_cache(0.0, batch=4, seq_tokens=256, per_token=2048, max_num_seqs=256, available=64 * GiB)
    (args,) = [engine_args(c) for c in commands(cfg, on_cpu=on_cpu, kv_plan=plan)]
    assert args.enforce_eager == eager


@pytest.mark.parametrize("dtype, flag", [("bf16", "bfloat16"), ("fp32", "float32")])
def test_a_local_server_starts_in_the_trainers_dtype(tiny_lora_policy, tmp_path, monkeypatch, dtype, flag):
    """What a local server is started with carries the trainer's dtype: a bf16 run's server computes in vLLM's
    bf16, whose mismatch against the trainer the colocated engine's bf16 test bounds (tests/rollout/
    test_conformance.py; the same test on a started server is `slow`)."""
    from rlx.rollout.server import engine as server_engine
    from rlx.run.config import TrainerConfig
    from rlx.run.device import resolve

    class Started(Exception):
        pass

    argv = []

    def start(cls, n, command_for, *args, **kwargs):
        argv.extend(command_for(8000, None))
        raise Started  # nothing is started

    monkeypatch.setattr(server_engine.ServerPool, "local", classmethod(start))
    policy, tok = tiny_lora_policy
    trainer = resolve(OmegaConf.structured(TrainerConfig(device="cpu", dtype=dtype)))
    with pytest.raises(Started):
        server_engine.VLLMServerEngine(rollout(), tok, policy, trainer, base_dir=tmp_path / "policy", max_len=96)
    assert engine_args(argv).dtype == flag
