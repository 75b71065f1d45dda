"""Policy construction: base model (tiny, a local HF path or a GGUF file, each optionally after the SFT stage)
-> [quantized] -> LoRA, or the base with every weight trainable (model.finetune=full)."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from rlx.models import sft
from rlx.models.config import chat_template_text
from rlx.models.forward import causal_lm, token_logprobs
from rlx.models.tiny import cache_key, load_or_build_tiny
from rlx.models.tokenizer import build_char_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _hf_path(model_cfg, log=print) -> Path:
    """The local HF checkpoint of a non-tiny model: model.path, or model.gguf_file's cached conversion."""
    if model_cfg.source == "gguf":
        from rlx.models.gguf import converted_dir

        return converted_dir(model_cfg, log)
    if not model_cfg.path:
        raise ValueError("model.source=hf needs model.path (a local directory with a causal LM and its tokenizer)")
    path = Path(model_cfg.path).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path: no config.json in {path}")
    return path


def load_tokenizer(model_cfg, log=print):
    """The policy's tokenizer (no model weights), with model.chat_template set on it when given."""
    if model_cfg.source == "tiny":
        tok = build_char_tokenizer()
    elif model_cfg.source in ("hf", "gguf"):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(_hf_path(model_cfg, log), local_files_only=True)
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
    else:
        raise ValueError(f"model.source: unknown source '{model_cfg.source}'; expected tiny, hf or gguf")
    if model_cfg.get("chat_template"):
        tok.chat_template = chat_template_text(model_cfg.chat_template)  # the template, or the file it names
    return tok


def _load_dir(path: Path, dtype: str, log=print):
    """A saved causal LM, read from disk so a fresh run and a resumed one start from bitwise the same base."""
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"model.dtype: '{dtype}' is not one of {sorted(DTYPES)}")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], local_files_only=True)
    log(f"[model] loaded {type(model).__name__} from {path}")
    return model.eval()


def load_hf(model_cfg, log=print, tok=None):
    """A transformers causal LM and its tokenizer from a local directory (no hub access)."""
    path = _hf_path(model_cfg, log)
    tok = load_tokenizer(model_cfg, log) if tok is None else tok
    return _load_dir(path, model_cfg.dtype, log), tok


def _sft_start(cfg, log):
    """The float32 model SFT starts from: the tiny random init (seeded by the caller) or the pretrained one."""
    if cfg.model.source == "tiny":
        from transformers import Qwen2ForCausalLM

        from rlx.models.tiny import tiny_config

        tok = build_char_tokenizer()
        return Qwen2ForCausalLM(tiny_config(cfg.model, len(tok), tok))
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(_hf_path(cfg.model, log), dtype=torch.float32, local_files_only=True)


def _start_dir(cfg, log=print) -> Path | None:
    """The HF directory the base comes from (None for the tiny model, built here)."""
    return None if cfg.model.source == "tiny" else _hf_path(cfg.model, log)


def load_base(cfg, task, log=print, device: torch.device | str = "cpu"):
    """(model, tokenizer) of the base before quantization and LoRA (with model.sft.data: the SFT result)."""
    tok = load_tokenizer(cfg.model, log)
    task.render_chat(tok, all_prompts=cfg.model.chat_prompts)
    if sft.enabled(cfg.model):
        path = sft.warm_start(cfg, task, tok, lambda: _sft_start(cfg, log), _start_dir(cfg, log), log, device)
        return _load_dir(path, cfg.model.dtype, log), tok
    if cfg.model.source == "tiny":
        model, tok, _ = load_or_build_tiny(cfg.model, warm_start_data(cfg), task, log, tok)
        return model, tok
    return load_hf(cfg.model, log, tok)


def attach_lora(model, lora_cfg, quantized: bool = False):
    """Freeze the base and add PEFT LoRA adapters (saved in PEFT format)."""
    from peft import LoraConfig, get_peft_model

    lcfg = LoraConfig(r=lora_cfg.r, lora_alpha=lora_cfg.alpha, lora_dropout=lora_cfg.dropout,
                      target_modules=list(lora_cfg.target_modules), task_type="CAUSAL_LM")
    if quantized:  # teach PEFT to wrap the packed quantized linear layers
        from rlx import quant

        lcfg = quant.prepare_lora_config(lcfg)
    for p in model.parameters():
        p.requires_grad_(False)
    return get_peft_model(model, lcfg)


def count_params(model) -> int:
    """Parameters the forward uses, packed quantized weights included (a quantized model counts as 16-bit)."""
    from rlx.quant.linear import QuantLinear

    packed = sum(m.out_features * m.in_features for m in model.modules() if isinstance(m, QuantLinear))
    return sum(q.numel() for q in model.parameters()) + packed


def warm_start_data(cfg):
    """What the tiny base's SFT warm start trains on, for its cache key: the task group's training split, or an
    environment's own dataset (env=verifiers brings its rows; two environments on one task group must not share
    a base)."""
    env = cfg.get("env")
    if env is not None and env.get("name") == "verifiers":
        args = OmegaConf.to_container(env.args, resolve=True) if OmegaConf.is_config(env.args) else env.args
        return {"env": {"id": str(env.id), "args": args or {}}}
    return cfg.task


def base_dir(cfg) -> Path:
    """The base model's HF checkpoint directory (what vLLM loads): the SFT stage's result with model.sft.data."""
    if sft.enabled(cfg.model):
        return sft.sft_dir(cfg, _start_dir(cfg))
    if cfg.model.source == "tiny":
        return Path(cfg.model.cache_dir).expanduser().resolve() / f"tiny-{cache_key(cfg.model, warm_start_data(cfg))}"
    return _hf_path(cfg.model)


base_label = sft.base_label  # "SFT" or "pretrained": what the step-0 evaluation's line calls the base


def sft_record(cfg) -> dict | None:
    """The SFT stage's summary metrics (sft/eval_loss_before, ...) once build_policy built it; None without it."""
    return sft.read_record(base_dir(cfg)) if sft.enabled(cfg.model) else None


def head_dim(cfg) -> int:
    """Attention head size of the configured model, known before the model is built."""
    if cfg.model.source == "tiny":
        return cfg.model.hidden_size // cfg.model.num_heads
    import json

    c = json.loads((_hf_path(cfg.model) / "config.json").read_text())
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def has_lora(model) -> bool:
    """True for a PEFT (LoRA) policy, False for a fully fine-tuned plain causal LM."""
    return hasattr(model, "peft_config")


def set_gradient_checkpointing(model) -> None:
    """Recompute decoder layers in the backward (train mode only), non-reentrant: LoRA keeps its grads."""
    lm = causal_lm(model)
    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lm.config.use_cache = False  # the training forward caches nothing; generation passes use_cache=True itself


def build_policy(cfg, task, log=print, device: torch.device | str = "cpu"):
    """The one policy on `device`: frozen [quantized] base + LoRA, or every weight trainable (full)."""
    model, tok = load_base(cfg, task, log, device)
    if cfg.model.finetune == "full":
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        quantized = cfg.quant.format != "none"
        if quantized:
            from rlx import quant

            model = quant.quantize_model(model, cfg.quant)
        torch.manual_seed(cfg.seed)  # LoRA init must not depend on whether the base was just built or loaded
        model = attach_lora(model, cfg.model.lora, quantized)
    if cfg.model.gradient_checkpointing:
        set_gradient_checkpointing(model)
    return model.to(device), tok


def reference_policy(cfg, policy):
    """The KL reference (full fine-tuning, beta > 0): a frozen copy, taken before a checkpoint loads."""
    if cfg.model.finetune != "full" or cfg.algo.beta <= 0:
        return None
    import copy

    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


__all__ = ["base_dir", "base_label", "sft_record", "head_dim", "build_policy", "has_lora", "reference_policy", "load_base", "attach_lora", "causal_lm", "token_logprobs", "build_char_tokenizer"]
