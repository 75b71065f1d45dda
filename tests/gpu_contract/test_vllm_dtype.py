"""fp32 must not reach vLLM's half-precision GPU kernels (issue 57, failure 2).

On CUDA a vLLM engine that serves a LoRA adapter (sync=adapter, and sync=auto with a quantized base)
runs vLLM's Punica LoRA kernels, and an NVFP4 base runs Marlin FP4 on Hopper: both assert fp16/bf16.
The tiny model pins trainer.dtype=fp32 (conf/model/tiny.yaml), which the engine's dtype follows. Preflight
moves such a run to bf16 with a logged line (docs/engine.md, "On a GPU"); these tests call vLLM's own
checks with fp32 (refused) and with the dtype rlx now hands vLLM for that config (accepted).

Stubs: torch.cuda.is_available / is_bf16_supported (rlx asks torch whether there is a GPU) and
rlx.rollout.vllm_setup.vllm_on_cpu (rlx asks vLLM which platform it was built for)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import compose

TINY_CUDA = ["model=tiny", "trainer.device=cuda", "trainer.threads=1"]


@pytest.fixture
def cuda_box(monkeypatch):
    """What rlx sees on a machine with a bf16-capable GPU and vLLM's CUDA build."""
    import rlx.rollout.vllm_setup as rv

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(rv, "vllm_on_cpu", lambda: False)
    monkeypatch.setattr(rv, "installed_builds", lambda lookup=None: ["vllm"])  # the GPU build's metadata


def lora_shrink_reaches_its_kernel(dtype: torch.dtype) -> bool:
    """vLLM's LoRA shrink op (the first kernel of every LoRA forward) on `dtype` activations and weights:
    True when its dtype assertions pass (it zeroes its output right after them, then launches the Triton
    kernel, which fails here without a GPU); False when they refuse the dtype."""
    from vllm.lora.ops.triton_ops.lora_shrink_op import _lora_shrink

    M, K, R = 4, 16, 8  # tokens, hidden size, LoRA rank
    out = torch.ones(1, M, R)  # [slices, tokens, rank]
    i32 = dict(dtype=torch.int32)
    try:
        _lora_shrink(torch.randn(M, K).to(dtype), [torch.randn(1, R, K).to(dtype)], out,
                     torch.zeros(M, **i32), torch.arange(M, **i32), torch.tensor([M], **i32),
                     torch.tensor([0, M], **i32), torch.tensor([0], **i32), torch.tensor([False]), torch.tensor([1]),
                     1.0)
    except AssertionError:
        assert torch.equal(out, torch.ones_like(out))  # refused before it touched anything
        return False
    except Exception:  # noqa: BLE001  (the kernel launch itself: no GPU here)
        pass
    return bool((out == 0).all())


def marlin_fp4_accepts(dtype: torch.dtype) -> bool:
    """Marlin FP4's global-scale preparation, run on every NVFP4 layer vLLM loads on Hopper, with the
    layer's params dtype (the model dtype)."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import nvfp4_marlin_process_global_scale

    try:
        nvfp4_marlin_process_global_scale(torch.tensor(1.0), a_dtype=dtype)
    except AssertionError:
        return False
    return True


def engine_dtype(spec) -> torch.dtype:
    """The dtype the colocated engine passes vLLM for this run's DeviceSpec (rlx.rollout.vllm)."""
    from rlx.rollout.vllm_setup import ENGINE_DTYPES

    return getattr(torch, ENGINE_DTYPES[spec.dtype])


def test_vllm_kernels_refuse_fp32():
    assert not lora_shrink_reaches_its_kernel(torch.float32)
    assert not marlin_fp4_accepts(torch.float32)
    assert lora_shrink_reaches_its_kernel(torch.bfloat16)
    assert marlin_fp4_accepts(torch.bfloat16)


@pytest.mark.parametrize("overrides", [["rollout=vllm", "quant=nvfp4"],  # sync=auto: NVFP4 base + adapter
                                       ["rollout=vllm", "rollout.vllm.sync=adapter"],
                                       ["rollout=vllm_server"]],  # a local server serves the adapter
                         ids=["vllm-nvfp4-auto", "vllm-adapter", "vllm_server"])
def test_a_tiny_run_on_cuda_hands_vllm_a_dtype_its_kernels_take(cuda_box, overrides, capsys):
    from rlx.config.preflight import check

    cfg = compose(TINY_CUDA + overrides)
    assert cfg.trainer.dtype == "fp32"  # the tiny model's pin
    spec = check(cfg)
    dtype = engine_dtype(spec)
    assert lora_shrink_reaches_its_kernel(dtype)
    assert marlin_fp4_accepts(dtype)
    assert cfg.trainer.dtype == "bf16" and spec.dtype == torch.bfloat16  # recorded as run
    assert "trainer.dtype=fp32 -> bf16" in capsys.readouterr().out


def test_dense_engines_keep_fp32(cuda_box):
    """Merged weights are served dense: vLLM's Triton attention and dense GEMMs take fp32, so the pin stays."""
    from rlx.config.preflight import check

    spec = check(compose(TINY_CUDA + ["rollout=vllm", "quant=nvfp4", "rollout.vllm.sync=merged"]))
    assert spec.dtype == torch.float32


def test_cpu_keeps_the_tiny_models_fp32():
    from rlx.config.preflight import check

    spec = check(compose(["model=tiny", "trainer.device=cpu", "trainer.threads=1", "rollout=vllm", "quant=nvfp4"]))
    assert spec.dtype == torch.float32


def test_a_gpu_without_bf16_is_refused_by_name(cuda_box, monkeypatch):
    from rlx.config.preflight import check

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(ValueError, match="trainer.dtype=fp32.*rollout.vllm.sync=merged"):
        check(compose(TINY_CUDA + ["rollout=vllm", "quant=nvfp4"]))
