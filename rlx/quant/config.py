"""The `quant.*` schema (frozen-base quantization formats); registered by rlx.config."""

from dataclasses import dataclass, field


@dataclass
class QuantConfig:
    """Frozen-base quantization (QeRL). `format` is a registered name: none | nvfp4 | nf4 | mxfp4."""

    format: str = field(default="none", metadata={
        "help": "base weight format: none | nvfp4 | nf4 | mxfp4 (docs/quant.md)"})
    targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "module-name suffixes of the decoder blocks' linear layers that get quantized"})
    double_quant: bool = field(default=False, metadata={
        "help": "NF4 only: quantize the absmax scales (QLoRA double quantization)"})
    kernel: str = field(default="auto", metadata={
        "help": "auto | torch | triton  (forward implementation of the packed linear)"})
    fuse_global_scales: bool = field(default=True, metadata={
        "help": "NVFP4 only: one global scale shared by q/k/v and one by gate/up (vLLM fuses those layers)"})
