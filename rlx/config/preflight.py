"""Preflight, the first thing `rlx.train` does: every value checked before any model is built, naming its key. A
group's own checks run in `convert`; here are the rules that read several groups. A typo costs a second."""

from __future__ import annotations

import torch

from rlx.run.device import DeviceSpec, resolve
from rlx.run import distributed as dist
from rlx.config import unknown_keys
from rlx.extrapolation import build_extrapolator
from rlx.noise import build_noise
from rlx.envs import check_env
from rlx.rollout import check_engine


def check(cfg) -> DeviceSpec:
    """Every value the loop needs, checked before any model is built (naming the key)."""
    check_values(cfg)
    convert(cfg)
    check_finetune(cfg, dist.launched_world_size())
    check_distributed(cfg, dist.launched_world_size())
    check_shared_prefix(cfg)
    build_noise(cfg.noise, cfg.train.steps, cfg.seed)  # AQN's schedule against train.steps (no model needed)
    build_extrapolator(cfg.extrapolation, cfg.train.steps)  # NExt's jump steps against train.steps
    if cfg.model.source == "gguf":  # the file (and its package) exist; rollout=vllm's head_dim check below converts it
        from rlx.models.gguf import resolve_gguf

        resolve_gguf(cfg.model.gguf_file)
    trainer = resolve(cfg.trainer, dist.launched_world_size(), dist.env_local_rank())
    record_dtype(cfg, trainer)
    trainer = half_precision_for_vllm(cfg, trainer)
    check_engine(cfg)
    check_env(cfg)  # the env group against the rollout budget and mode (rlx/envs)
    return trainer


def record_dtype(cfg, trainer: DeviceSpec) -> None:
    """`trainer.dtype=auto` resolved in the config, so every later reader and a resume see fp32 or bf16."""
    if cfg.trainer.dtype != "auto":
        return
    from omegaconf import read_write

    from rlx.run.logging import say

    with read_write(cfg.trainer):
        cfg.trainer.dtype = trainer.dtype_name
    say(f"[device] trainer.dtype=auto -> {trainer.dtype_name} ({trainer.dtype_why.removeprefix('auto: ')})")


def vllm_serves_adapter_on_gpu(cfg) -> str:
    """What a vLLM engine of this run would serve through its half-precision-only GPU kernels ('' if none): a LoRA
    adapter, with an NVFP4 base (docs/engine.md); dense weights take fp32 too, running servers their own dtype."""
    engine, r = cfg.rollout.engine, cfg.rollout
    if engine not in ("vllm", "vllm_server") or (engine == "vllm_server" and not r.server.num):
        return ""
    from rlx.rollout.vllm_setup import sync_mode, vllm_on_cpu

    lora = cfg.model.finetune != "full"
    if not lora or vllm_on_cpu():
        return ""
    if engine == "vllm":
        mode = sync_mode(r.vllm.sync, cfg.quant.format, lora=True)
        fmt = cfg.quant.format if mode == "adapter" and cfg.quant.format != "none" else ""
    else:  # a server takes LoRA as an adapter unless merged is asked for (rlx.rollout.server.engine)
        mode, fmt = ("merged" if r.vllm.sync == "merged" else "adapter"), ""
    if mode != "adapter":
        return ""
    return f"rollout={engine} with a LoRA adapter" + (f" on a quant.format={fmt} base" if fmt else "")


def half_precision_for_vllm(cfg, trainer: DeviceSpec) -> DeviceSpec:
    """fp32 with a vLLM engine serving an adapter on a GPU (kernels that assert fp16/bf16): bf16, or refused."""
    if trainer.dtype != torch.float32:
        return trainer
    what = vllm_serves_adapter_on_gpu(cfg)
    if not what:
        return trainer
    keep = "use rollout.vllm.sync=merged (dense weights, which vLLM serves in fp32) or rollout=hf"
    if not torch.cuda.is_bf16_supported():
        raise ValueError(f"trainer.dtype=fp32 with {what} on a GPU: vLLM's LoRA and FP4 kernels take fp16/bf16 "
                         f"only, and this GPU has no bf16; {keep}")
    if cfg.algo.fp32_lm_head:
        raise ValueError(f"algo.fp32_lm_head with {what} on a GPU: vLLM's LoRA and FP4 kernels take bf16 (not fp32), "
                         f"and vLLM computes the LM head in its dtype; turn algo.fp32_lm_head off, or {keep}")
    from dataclasses import replace

    from omegaconf import read_write

    from rlx.run.logging import say

    with read_write(cfg.trainer):
        cfg.trainer.dtype = "bf16"
    why = f"{what} on a GPU: vLLM's LoRA and FP4 kernels take fp16/bf16 only"
    say(f"[device] trainer.dtype=fp32 -> bf16: {why} (to keep fp32, {keep})")
    return replace(trainer, dtype=torch.bfloat16, dtype_why=why)


def convert(cfg) -> dict:
    """Each group as its package's typed config, once: every check of one group's values runs here."""
    from omegaconf import OmegaConf

    from rlx.algo.config import as_config as algo
    from rlx.models.config import as_config as model
    from rlx.rollout.config import as_config as rollout
    from rlx.run.config import as_config as run_group
    from rlx.scaling.config import as_config as scaling
    from rlx.tasks.config import as_config as task

    return {"model": model(cfg.model), "task": task(cfg.task), "rollout": rollout(cfg.rollout),
            "algo": algo(cfg.algo), "scaling": scaling(cfg.scaling),
            **{k: run_group(cfg[k]) for k in ("trainer", "train", "logger")},
            **{k: OmegaConf.to_object(cfg[k]) for k in ("quant", "noise", "extrapolation")}}


def check_finetune(cfg, world_size: int = 1) -> None:
    """What full fine-tuning cannot do with other groups (docs/models.md); model.lora.* is ignored, not refused."""
    if cfg.model.finetune != "full":  # the name itself and full with 16-bit weights: rlx.models.config
        return
    for bad, what in ((cfg.quant.format != "none", f"quant.format={cfg.quant.format} (a quantized base is frozen: "
                                                    f"only a LoRA adapter trains on it)"),
                      (cfg.extrapolation.type != "none", f"extrapolation.type={cfg.extrapolation.type} (NExt and "
                                                         f"the linear baseline extend the LoRA adapter's rank-1 records)"),
                      (cfg.rollout.engine in ("vllm", "vllm_server") and cfg.rollout.vllm.sync == "adapter",
                       "rollout.vllm.sync=adapter (there is no adapter to serve; sync=auto reloads every weight)"),
                      (world_size > 1 and cfg.trainer.strategy == "fsdp", f"trainer.strategy=fsdp on {world_size} "
                       f"ranks (only the decoder layers are sharded; use trainer.strategy=ddp)")):
        if bad:
            raise ValueError(f"model.finetune=full with {what} is not supported; use model.finetune=lora, or "
                             f"turn it off")


def check_shared_prefix(cfg) -> None:
    """algo.shared_prefix feeds the prompt's KV cache to its completions, which gradient checkpointing drops."""
    if cfg.algo.shared_prefix and cfg.model.get("gradient_checkpointing", False):
        raise ValueError("algo.shared_prefix=true with model.gradient_checkpointing=true: checkpointed layers drop "
                         "the prompt's KV cache the completions attend to; turn one of them off")


def check_distributed(cfg, world_size: int) -> None:
    """What N data-parallel ranks cannot do (yet), refused before any work."""
    if world_size <= 1:
        return
    if cfg.rollout.mode == "async":
        raise ValueError(f"rollout.mode=async with {world_size} processes (torchrun): every rank would fill its own queue "
                         f"and take batches at its own moments, so the ranks' batches would differ. Use rollout.mode=stale "
                         f"(generation with the policy of exactly k updates ago) or sync under torchrun")
    if cfg.trainer.strategy == "fsdp":
        for bad, what in ((cfg.rollout.engine != "hf", f"rollout={cfg.rollout.engine} (the engine would need whole weights "
                                                       f"exported from the shards)"),
                          (cfg.rollout.mode != "sync", f"rollout.mode={cfg.rollout.mode} (old adapter versions are "
                                                       f"loaded into sharded tensors)"),
                          (cfg.noise.type != "none", f"noise={cfg.noise.type} (AQN perturbs whole norm weights)"),
                          (cfg.extrapolation.type != "none", f"extrapolation={cfg.extrapolation.type} (NExt's rank-1 "
                                                             f"records need whole adapter matrices)")):
            if bad:
                raise ValueError(f"trainer.strategy=fsdp with {what} is not supported; use trainer.strategy=ddp "
                                 f"(replicated weights), which supports it")


def check_values(cfg) -> None:
    """What no group's dataclass can see: keys outside the schema, and over the whole config rlx.config.limits."""
    unknown = unknown_keys(cfg)
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown}: not in rlx's schema, so nothing would read them "
                         f"(a `+key=value` override adds keys; check the spelling, `--help` lists every key)")
    from rlx.config.limits import check_model, check_numbers

    check_numbers(cfg)  # every numeric field of every schema: NaN / inf / out of its range (rlx/config/limits.py)
    check_model(cfg)  # the tiny model's heads and width, model.dtype, quant.format / quant.kernel
