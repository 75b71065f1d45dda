"""PEFT LoRA on top of QuantLinear (registered through PEFT's custom-module mechanism)."""

from typing import Any

from peft import LoraConfig
from peft.tuners.lora.layer import LoraLayer
from torch import Tensor, nn

from rlx.quant.linear import QuantLinear


class LoraQuantLinear(nn.Module, LoraLayer):
    """LoRA beside a frozen QuantLinear: y = base(x) + B(A(dropout(x))) * scaling; merging (into the codes) refused."""

    def __init__(self, base_layer: nn.Module, adapter_name: str, config: LoraConfig, r: int = 0, lora_alpha: int = 1,
                 **kwargs: Any):
        if config.use_dora:
            raise ValueError("LoRA on a QuantLinear base does not support DoRA (use_dora=False)")
        super().__init__()
        LoraLayer.__init__(self, base_layer)
        self.fan_in_fan_out = False
        self._active_adapter = adapter_name
        self.update_layer(adapter_name, r, lora_alpha=lora_alpha, config=config, **kwargs)

    def _get_in_out_features(self, module: nn.Module) -> tuple[int, int]:
        return module.in_features, module.out_features

    def _get_base_layer_device_and_dtype(self, base_layer: nn.Module):
        # adapters go to the device of the packed codes; their dtype is left to PEFT (fp32 by default)
        return base_layer.weight_packed.device, None

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        result = self.base_layer(x)
        if self.disable_adapters:
            return result
        for name in self.active_adapters:
            if name not in self.lora_A.keys():
                continue
            lora_a, lora_b = self.lora_A[name], self.lora_B[name]
            x_lora = self._cast_input_dtype(x, lora_a.weight.dtype)
            delta = lora_b(lora_a(self.lora_dropout[name](x_lora))) * self.scaling[name]
            result = result + delta.to(result.dtype)
        return result

    def merge(self, safe_merge: bool = False, adapter_names: list[str] | None = None) -> None:
        raise NotImplementedError("cannot merge LoRA into a packed 4-bit QuantLinear base")

    def unmerge(self) -> None:
        raise NotImplementedError("cannot unmerge LoRA from a packed 4-bit QuantLinear base")

    def get_delta_weight(self, adapter: str) -> Tensor:
        """[N, K] full-precision update B @ A * scaling of one adapter."""
        a, b = self.lora_A[adapter].weight, self.lora_B[adapter].weight
        return (b @ a) * self.scaling[adapter]

    def __repr__(self) -> str:
        return "lora." + super().__repr__()


def prepare_lora_config(lora_config: LoraConfig) -> LoraConfig:
    """Register QuantLinear -> LoraQuantLinear with PEFT (harmless without packed layers); returns the same config."""
    if not isinstance(lora_config, LoraConfig):
        raise ValueError(f"prepare_lora_config expects a peft.LoraConfig, got {type(lora_config).__name__}")
    lora_config._register_custom_module({QuantLinear: LoraQuantLinear})
    return lora_config


def load_lora_adapter(model: nn.Module, path: str, is_trainable: bool = False):
    """PeftModel.from_pretrained, re-registering QuantLinear first (the saved adapter_config.json does not carry it)."""
    from peft import PeftModel

    config = prepare_lora_config(LoraConfig.from_pretrained(path))
    return PeftModel.from_pretrained(model, path, config=config, is_trainable=is_trainable)
