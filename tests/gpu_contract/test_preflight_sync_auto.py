"""nf4 / mxfp4 on CUDA with rollout=vllm (issue 57): vLLM serves rlx's NVFP4 export only, so these
formats reach it as merged dense weights; `sync=auto` must pick merged there (it picked adapter, which
check_engine_config refuses for them, so no default run passed preflight).

Stubs: torch.cuda.is_available / is_bf16_supported and rlx.rollout.vllm_setup.vllm_on_cpu (see test_vllm_dtype)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import compose
from tests.gpu_contract.test_vllm_dtype import cuda_box  # noqa: F401  (fixture)

TINY_CUDA = ["model=tiny", "trainer.device=cuda", "trainer.threads=1", "rollout=vllm"]


@pytest.mark.parametrize("fmt", ["nf4", "mxfp4"])
def test_sync_auto_serves_nf4_and_mxfp4_merged_on_cuda(cuda_box, fmt, tmp_path):  # noqa: F811
    from rlx.config.preflight import check
    from rlx.rollout.vllm_setup import engine_kwargs, sync_mode

    cfg = compose(TINY_CUDA + [f"quant={fmt}"])
    spec = check(cfg)  # refused before: "a nf4 base is not exported"
    mode = sync_mode(cfg.rollout.vllm.sync, fmt, lora=True, on_cpu=False)
    assert mode == "merged"
    # what vLLM is then asked to serve: a dense model, no LoRA slots, in the tiny model's fp32 (dense kernels take it)
    from vllm.engine.arg_utils import EngineArgs

    kw = engine_kwargs(cfg.rollout, tmp_path, dtype=spec.dtype, max_model_len=64, seed=0, on_cpu=False,
                       lora_rank=None if mode != "adapter" else 16)
    args = EngineArgs(**kw)
    assert not args.enable_lora and args.quantization is None and args.dtype == "float32"
    assert spec.dtype == torch.float32


@pytest.mark.parametrize("fmt", ["nf4", "mxfp4"])
def test_sync_adapter_with_nf4_on_cuda_is_refused_by_name(cuda_box, fmt):  # noqa: F811
    from rlx.config.preflight import check

    with pytest.raises(ValueError, match=f"quant.format={fmt}.*rollout.vllm.sync=merged"):
        check(compose(TINY_CUDA + [f"quant={fmt}", "rollout.vllm.sync=adapter"]))
