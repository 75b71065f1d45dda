"""`rollout.vllm.enforce_eager` by device (issue 57): `auto` (the default) is eager on the CPU (a fast
start; inductor gained nothing there, docs/engine.md) and compiled on a GPU (CUDA graphs: decode is
launch-bound without them, and most of an NVFP4 rollout's speed-up goes). Shown through vLLM's own config:
an eager engine compiles nothing (compilation mode NONE), a GPU engine of rlx's compiles."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from tests.gpu_contract.test_vllm_torchrun import tiny_model_dir


def vllm_config(tmp_path, on_cpu: bool, enforce_eager=None):
    from vllm.engine.arg_utils import EngineArgs

    from rlx.rollout.config import RolloutConfig
    from rlx.rollout.vllm_setup import engine_kwargs

    cfg = OmegaConf.structured(RolloutConfig(engine="vllm"))
    if enforce_eager is not None:  # else the shipped default
        cfg.vllm.enforce_eager = enforce_eager
    kw = engine_kwargs(cfg, tiny_model_dir(tmp_path), dtype=torch.bfloat16, max_model_len=64, seed=0, on_cpu=on_cpu)
    return EngineArgs(**kw).create_engine_config()


@pytest.mark.parametrize("on_cpu,value,eager", [(False, None, False), (True, None, True), (False, "auto", False),
                                                (False, "true", True), (False, True, True), (True, False, False)])
def test_enforce_eager_follows_the_device(tmp_path, monkeypatch, on_cpu, value, eager):
    from vllm.config import CompilationMode

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    config = vllm_config(tmp_path, on_cpu, value)
    assert config.model_config.enforce_eager == eager
    assert (config.compilation_config.mode == CompilationMode.NONE) == eager


@pytest.mark.parametrize("bad", ["yes", "gpu", ""])
def test_other_values_are_refused_by_name(bad):
    from rlx.rollout.config import RolloutConfig, VLLMConfig

    with pytest.raises(ValueError, match="rollout.vllm.enforce_eager"):
        RolloutConfig(engine="vllm", vllm=VLLMConfig(enforce_eager=bad))
