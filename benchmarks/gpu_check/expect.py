"""What the GPU check expects on Hopper and on Blackwell, and what vLLM chose, read from its log.

These are expectations, read from vLLM 0.32's kernel selection code and QeRL's published figures,
not measurements: the measured figures go to gpu_bench.json and docs/gpu.md's Results."""

from __future__ import annotations

import re

# compute capability major -> architecture name used in the expectations below
ARCHS = {9: "hopper", 10: "blackwell"}

# QeRL (arXiv 2510.11696) rollout tokens/s, Qwen2.5-7B, BF16 LoRA -> NVFP4 LoRA, vLLM with Marlin FP4 on an
# H100: weight-only NVFP4 (W4A16) on Hopper too (NVlabs/QeRL issue #10). batch -> (bf16, nvfp4)
QERL_7B_TOKENS_PER_S = {2: (115.4, 151.6), 8: (1641.1, 2091.8)}

# vLLM 0.32, init_nvfp4_linear_kernel(use_a16=True) (model_executor/kernels/linear/__init__.py): sm_100/103
# force FlashInfer's CuTe-DSL W4A16; sm_90 prefers Humming (when the package is installed) over Marlin FP4;
# any other CUDA capability forces Marlin FP4.
EXPECTED_NVFP4_KERNEL = {
    "hopper": ("HummingNvFp4LinearKernel", "MarlinNvFp4LinearKernel"),
    "blackwell": ("FlashInferCuteDslNvFp4W4A16LinearKernel",),
    "other": ("MarlinNvFp4LinearKernel",),
}

EXPECTED_RATIO = {
    "hopper": (1.2, 1.5, "weight-only NVFP4 dequantized to bf16 inside Humming or Marlin FP4, bf16 tensor-core "
                         "math: decode reads 4-bit weights (about 2.6x fewer bytes) but attention, the KV cache and "
                         "the bf16 LM head (vocab 152064) do not shrink"),
    "blackwell": (1.2, 1.5, "FlashInfer CuTe-DSL W4A16: still weight-only (rlx exports no activation scales), so "
                            "the same bandwidth argument as Hopper; no published figure for this kernel"),
    "other": (1.0, 1.5, "Marlin FP4 (weight-only); no published figure"),
}

# what each part expects, by architecture (printed by --help and written to the JSON)
PART_EXPECTATIONS = {
    "toolchain": "any GPU: torch with CUDA, a bf16-capable device (sm_80+); records versions, GPU, capability",
    "nccl": "any GPU: a 1-rank 'cpu:gloo,cuda:nccl' group all-reduces a CPU and a CUDA tensor; 'nccl' alone "
            "rejects the CPU tensor ('No backend type associated with device type cpu')",
    "triton": "Hopper: 16-row tiles on mma.sync, 64-row tiles on wgmma; Blackwell: tcgen05 MMA; on both, "
              "decode bit-exact and bf16 within 1e-2 of the torch path; records us/call and split-K's effect",
    "rl": "Hopper and Blackwell: exit 0, step 5, val/acc logged, trainer.dtype=bf16; records s/step, "
          "logprob_diff and, for vllm, the NVFP4 kernel and model runner it chose",
    "vllm": "Hopper: Humming or Marlin FP4 (weight-only, dequantized to bf16), NVFP4/bf16 about 1.2-1.5x; "
            "Blackwell: FlashInfer CuTe-DSL W4A16, about the same; V2 model runner (Triton present); records "
            "tokens/s, the kernel and runner from vLLM's log, and QeRL's 7B H100 ratio beside the measured one "
            "({:.2f}x at batch 2, {:.2f}x at batch 8)".format(*(new / old for old, new in QERL_7B_TOKENS_PER_S.values())),
    "hf": "Hopper and Blackwell: rlx's Triton NVFP4 kernel against dense bf16 cuBLAS in HF generate (no CUDA "
          "graphs, a launch per layer); no published figure to expect: the ratio is recorded, not judged",
}


def arch_of(capability: tuple[int, int] | None) -> str:
    if capability is None:
        return "none"
    return ARCHS.get(capability[0], "other")


def qerl_ratio(batch: int) -> float | None:
    pair = QERL_7B_TOKENS_PER_S.get(batch)
    return None if pair is None else pair[1] / pair[0]


def ratio_expectation(arch: str, batch: int) -> dict:
    """The figures recorded beside a measured NVFP4 / bf16 ratio."""
    low, high, why = EXPECTED_RATIO.get(arch, EXPECTED_RATIO["other"])
    qerl = qerl_ratio(batch)
    return {"arch": arch, "expected_low": low, "expected_high": high, "expected_why": why,
            "qerl_7b_h100_ratio": None if qerl is None else round(qerl, 3)}


# vLLM 0.32 log lines (logger.info_once / warning_once); tests/gpu_check/test_gpu_check.py checks that the
# installed vLLM still emits each of them
NVFP4_CHOSEN = re.compile(r"Using (\w+) for NVFP4 GEMM")
NVFP4_REFUSED = re.compile(r"Forced NVFP4 kernel (\w+) is not supported: ([^\n]*)")
V2_RUNNER = "Using V2 Model Runner"
V1_FALLBACK = re.compile(r"(Model Runner V2 [^\n]*?); using the V1 model runner instead")


def vllm_choices(log: str) -> dict:
    """{nvfp4_kernel, nvfp4_refused, model_runner, model_runner_why} from a vLLM process's log text."""
    chosen = NVFP4_CHOSEN.findall(log)
    refused = NVFP4_REFUSED.search(log)
    fallback = V1_FALLBACK.search(log)
    if V2_RUNNER in log:
        runner, why = "V2", "log: 'Using V2 Model Runner'"
    elif fallback:
        runner, why = "V1", f"log: {fallback.group(1)}"
    else:  # vLLM logs the V2 line whenever it builds the V2 runner
        runner, why = "V1", "no 'Using V2 Model Runner' line in the log"
    return {"nvfp4_kernel": chosen[-1] if chosen else None,
            "nvfp4_refused": f"{refused.group(1)}: {refused.group(2)}" if refused else None,
            "model_runner": runner, "model_runner_why": why}


def kernel_as_expected(arch: str, kernel: str | None) -> bool | None:
    if kernel is None:
        return None
    return kernel in EXPECTED_NVFP4_KERNEL.get(arch, EXPECTED_NVFP4_KERNEL["other"])
