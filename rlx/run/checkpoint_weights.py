"""The weights of a checkpoint step dir: the PEFT adapter (`adapter/`) or, with model.finetune=full, every
parameter (tied ones once) in `model/model.safetensors` beside `config.json`, a directory transformers loads."""

from __future__ import annotations

from pathlib import Path

import torch

MODEL = "model/model.safetensors"  # model.finetune=full: every weight of the policy


def is_lora(model) -> bool:
    return hasattr(model, "peft_config")  # PEFT's mark on a model it wrapped (what rlx.models.has_lora reads)


def write_weights(out: Path, model, weights: dict | None = None) -> None:
    """The policy's trainable weights under `out` (`weights`: whole tensors, when the module holds FSDP shards)."""
    if is_lora(model):
        model.save_pretrained(out / "adapter", state_dict=weights)
        return
    from safetensors.torch import save_file

    named = weights if weights is not None else dict(model.named_parameters())  # named_parameters: tied once
    (out / MODEL).parent.mkdir(parents=True)
    save_file({n: q.detach().contiguous().cpu() for n, q in named.items()}, str(out / MODEL), metadata={"format": "pt"})
    model.config.to_json_file((out / MODEL).parent / "config.json")


@torch.no_grad()
def load_full(path: Path, model, weights: dict) -> None:
    """Copy a full checkpoint's `weights` into `model`, every name and shape checked before the first copy."""
    params = dict(model.named_parameters())
    missing, unexpected = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
    wrong = [n for n in set(params) & set(weights) if params[n].shape != weights[n].shape]
    if missing or unexpected or wrong:
        raise ValueError(f"checkpoint {path}: {MODEL} is not of this model (missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]}, other shapes {wrong[:3]}); was it written with another model config?")
    for n, q in params.items():
        q.copy_(weights[n])
