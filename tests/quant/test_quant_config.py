"""conf/quant/*.yaml validate against QuantConfig and drive quantize_model as DictConfigs."""

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rlx.quant import FORMATS, QuantConfig, QuantLinear, quantize_model
from tests.quant.quant_helpers import tiny_qwen, token_ids

CONF = Path(__file__).resolve().parents[2] / "conf" / "quant"


@pytest.mark.parametrize("name", ["none", "nvfp4", "nf4", "mxfp4"])
def test_yaml_validates_and_runs(name):
    cfg = OmegaConf.merge(OmegaConf.structured(QuantConfig), OmegaConf.load(CONF / f"{name}.yaml"))
    assert cfg.format == name and (name == "none" or name in FORMATS)
    model = quantize_model(tiny_qwen(hidden=32, intermediate=64), cfg)  # the suite's tiny model size
    packed = [m for m in model.modules() if isinstance(m, QuantLinear)]
    assert len(packed) == (0 if name == "none" else 14)
    with torch.no_grad():
        assert torch.isfinite(model(token_ids()).logits).all()


def test_unknown_yaml_field_is_rejected():
    with pytest.raises(Exception, match="group_size"):
        OmegaConf.merge(OmegaConf.structured(QuantConfig), {"group_size": 8})
