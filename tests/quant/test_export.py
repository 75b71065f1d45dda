"""NVFP4 export -> compressed-tensors / transformers load -> identical dequantized weights; and back."""

import json

import pytest
import torch
from safetensors.torch import load_file

from rlx.quant import QuantConfig, QuantLinear, export_compressed_tensors, load_compressed_tensors, quantize_model
from rlx.quant.model import quant_linears
from tests.quant.quant_helpers import tiny_qwen, token_ids

pytest.importorskip("compressed_tensors")


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def exported(request, tmp_path_factory):
    model = quantize_model(tiny_qwen(tie=request.param), QuantConfig(format="nvfp4"))
    out = export_compressed_tensors(model, None, tmp_path_factory.mktemp("ckpt"))
    return model, out


def test_checkpoint_layout(exported):
    model, path = exported
    config = json.loads((path / "config.json").read_text())
    qcfg = config["quantization_config"]
    assert qcfg["quant_method"] == "compressed-tensors" and qcfg["format"] == "nvfp4-pack-quantized"
    assert qcfg["ignore"] == ["lm_head"]
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.quantization.quant_scheme import NVFP4A16

    parsed = QuantizationConfig.model_validate(qcfg)  # compressed-tensors accepts it
    assert parsed.config_groups["group_0"].weights == NVFP4A16["weights"]
    tensors = load_file(str(path / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj"
    assert tensors[f"{name}.weight_packed"].dtype == torch.uint8
    assert tensors[f"{name}.weight_scale"].dtype == torch.float8_e4m3fn
    assert tensors[f"{name}.weight_global_scale"].dtype == torch.float32
    assert f"{name}.weight" not in tensors and f"{name}.bias" in tensors


def test_compressed_tensors_dequantizer_gives_identical_weights(exported):
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer

    model, path = exported
    dense = CompressedTensorsDequantizer(path, dtype=torch.bfloat16).process(load_file(str(path / "model.safetensors")))
    for name, module in quant_linears(model).items():
        assert torch.equal(dense[f"{name}.weight"], module.dequantize(torch.bfloat16)), name


def test_transformers_load_gives_identical_weights_and_logits(exported):
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    model, path = exported
    hf = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=CompressedTensorsConfig(dequantize=True), dtype=torch.bfloat16
    )
    for name, module in quant_linears(model).items():
        assert torch.equal(hf.get_submodule(name).weight, module.dequantize(torch.bfloat16)), name
    ids = token_ids()
    with torch.no_grad():
        assert torch.equal(hf(ids).logits, model(ids).logits)


def test_rlx_loader_round_trip(exported):
    model, path = exported
    loaded = load_compressed_tensors(path, dtype=torch.bfloat16)
    ours = quant_linears(model)
    theirs = quant_linears(loaded)
    assert ours.keys() == theirs.keys()
    for name in ours:
        a, b = ours[name].quantized_weight, theirs[name].quantized_weight
        assert torch.equal(a.packed, b.packed) and torch.equal(a.scale.view(torch.uint8), b.scale.view(torch.uint8))
        assert torch.equal(a.global_scale, b.global_scale)
    ids = token_ids()
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_export_refuses_other_formats(tmp_path):
    with pytest.raises(ValueError, match="nvfp4 only"):
        export_compressed_tensors(quantize_model(tiny_qwen(), QuantConfig(format="nf4")), None, tmp_path)
    with pytest.raises(ValueError, match="no QuantLinear"):
        export_compressed_tensors(tiny_qwen(), None, tmp_path)
    assert not any(isinstance(m, QuantLinear) for m in tiny_qwen().modules())


def test_export_from_peft_model_writes_the_frozen_base(tmp_path):
    from peft import LoraConfig, get_peft_model

    from rlx.quant import prepare_lora_config

    model = quantize_model(tiny_qwen(), QuantConfig(format="nvfp4"))
    base_dir = export_compressed_tensors(model, None, tmp_path / "base")
    peft_model = get_peft_model(model, prepare_lora_config(LoraConfig(r=4, target_modules=["q_proj", "down_proj"])))
    peft_dir = export_compressed_tensors(peft_model, None, tmp_path / "peft")
    base, from_peft = load_file(str(base_dir / "model.safetensors")), load_file(str(peft_dir / "model.safetensors"))
    assert base.keys() == from_peft.keys()
    assert all(torch.equal(base[k].view(torch.uint8), from_peft[k].view(torch.uint8)) for k in base)
