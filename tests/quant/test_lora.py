"""PEFT LoRA on a packed base: trains, never touches the codes, saves/loads, disable_adapter = base."""

import pytest
import torch
from peft import LoraConfig, get_peft_model

from rlx.quant import (
    LoraQuantLinear,
    QuantConfig,
    load_lora_adapter,
    packed_state,
    prepare_lora_config,
    quantize_model,
)
from tests.quant.quant_helpers import LINEAR_NAMES, tiny_qwen, token_ids


def lora_config() -> LoraConfig:
    return prepare_lora_config(LoraConfig(r=4, lora_alpha=8, target_modules=list(LINEAR_NAMES), lora_dropout=0.0))


def train_steps(model, ids: torch.Tensor, steps: int = 3) -> list[float]:
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = model(ids, labels=ids).loss  # toy loss: next-token NLL on random ids
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("fmt", ["nvfp4", "nf4", "mxfp4"])
def test_lora_trains_and_packed_base_is_frozen(fmt, tmp_path):
    ids = token_ids()
    model = quantize_model(tiny_qwen(), QuantConfig(format=fmt, double_quant=True))
    with torch.no_grad():
        base_logits = model(ids).logits
    peft_model = get_peft_model(model, lora_config())
    wrapped = [m for m in peft_model.modules() if isinstance(m, LoraQuantLinear)]
    assert len(wrapped) == 14  # 7 projections x 2 layers
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)

    base_before = packed_state(peft_model)
    lora_before = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    train_steps(peft_model, ids)
    base_after = packed_state(peft_model)
    assert base_before.keys() == base_after.keys() and len(base_before) > 0
    assert all(torch.equal(base_before[k], base_after[k]) for k in base_before), "packed base changed"
    changed = [n for n, p in peft_model.named_parameters() if p.requires_grad and not torch.equal(p, lora_before[n])]
    assert len(changed) == len(lora_before)  # every LoRA matrix moved

    peft_model.eval()
    with torch.no_grad():
        adapted = peft_model(ids).logits
        with peft_model.disable_adapter():
            reference = peft_model(ids).logits
    assert torch.equal(reference, base_logits)  # disable_adapter gives the frozen base exactly
    assert not torch.equal(adapted, base_logits)

    peft_model.save_pretrained(tmp_path / "adapter")
    saved = (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size
    assert saved < 200_000  # adapters only, no base weights
    fresh = quantize_model(tiny_qwen(), QuantConfig(format=fmt, double_quant=True))
    reloaded = load_lora_adapter(fresh, str(tmp_path / "adapter"))
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, adapted)


def test_prepare_lora_config_is_harmless_without_quantization():
    ids = token_ids()
    plain = get_peft_model(tiny_qwen(), LoraConfig(r=4, lora_alpha=8, target_modules=list(LINEAR_NAMES)))
    prepared = get_peft_model(tiny_qwen(), lora_config())
    assert not any(isinstance(m, LoraQuantLinear) for m in prepared.modules())
    prepared.load_state_dict(plain.state_dict())
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, prepared(ids).logits)


def test_merge_is_refused():
    peft_model = get_peft_model(quantize_model(tiny_qwen(), QuantConfig(format="nvfp4")), lora_config())
    with pytest.raises(NotImplementedError, match="cannot merge"):
        peft_model.merge_adapter()
