"""Every numeric setting, checked by one walk of the composed config before any model is built (docs/runs.md, "Bad
input"): `check_numbers` refuses NaN / inf (a comparison with NaN is false, so it would pass every range check) and
values outside their `RANGES` entry (else `DEFAULT`, >= 0); `check_model` and `check_fits` relate several fields."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit


@dataclass(frozen=True)
class Range:
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, v) -> bool:
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi))

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {self.lo:g}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return "finite"

    def outside(self, integer: bool) -> float | int | None:
        """A value this range refuses (what a test sets), None if it takes every finite number."""
        if self.lo is not None:
            return self.lo if self.lo_open else self.lo - 1
        if self.hi is not None:
            return self.hi if self.hi_open else self.hi + 1
        return None


ANY = Range()  # every finite number
DEFAULT = Range(0)
COUNT = Range(1)
POSITIVE = Range(0, lo_open=True)
FRACTION = Range(0, 1)
SEED = Range(0, SEED_MAX)
LR = Range(0, 1)  # an AdamW step moves each weight by up to lr: beyond 1 it overflows (lr=1e38) or diverges
# key pattern (fnmatch on the dotted key; list items as .0, .1, ...) -> range; first match wins
RANGES: list[tuple[str, Range]] = [
    ("task.rewards.*", ANY), ("task.default_rewards.*", ANY),  # a negative weight is a penalty
    ("seed", SEED), ("*.seed", SEED),
    ("model.hidden_size", COUNT), ("model.intermediate_size", COUNT), ("model.num_layers", COUNT),
    ("model.num_heads", COUNT), ("model.num_kv_heads", COUNT), ("model.max_position_embeddings", COUNT),
    ("model.sft.batch_size", COUNT), ("model.sft.lr", LR), ("model.sft.demo_prefix_frac", FRACTION),
    ("model.lora.r", COUNT), ("model.lora.alpha", POSITIVE), ("model.lora.dropout", Range(0, 1, hi_open=True)),
    ("task.reward_timeout_s", POSITIVE), ("task.num_terms", Range(2)), ("task.max_operand", COUNT),
    ("task.digits", COUNT), ("task.steps", Range(1, 8)), ("task.num_keys", COUNT), ("task.length", Range(2)),
    ("task.demo_correct", FRACTION),
    ("rollout.group_size", Range(2)), ("rollout.prompts_per_step", COUNT), ("rollout.temperature", POSITIVE),
    ("rollout.top_p", Range(0, 1, lo_open=True)), ("rollout.eval_top_p", Range(0, 1, lo_open=True)),
    ("rollout.max_new_tokens", COUNT), ("rollout.eval_max_new_tokens", COUNT), ("rollout.batch_size", COUNT),
    ("rollout.vllm.gpu_memory_utilization", Range(0, 1, lo_open=True)), ("rollout.vllm.kv_cache_gb", DEFAULT),
    ("rollout.vllm.max_num_seqs", COUNT), ("rollout.interrupt.answer_tokens", COUNT),
    ("algo.eps_max", POSITIVE), ("algo.adv_eps", POSITIVE), ("algo.pass_rate_threshold", Range(0, 1, lo_open=True)),
    ("algo.lr", LR), ("algo.grad_clip", POSITIVE), ("algo.mu", COUNT), ("algo.micro_batch_size", COUNT),
    ("noise.stages", COUNT),
    ("extrapolation.interval", COUNT), ("extrapolation.horizon", COUNT), ("extrapolation.extend_at.*", COUNT),
    ("extrapolation.alpha", ANY), ("extrapolation.hidden", COUNT), ("extrapolation.epochs", COUNT),
    ("extrapolation.lr", LR), ("extrapolation.min_lr_ratio", FRACTION),
    ("scaling.exclude_fraction", Range(0, 1, hi_open=True)), ("scaling.fit_fraction", Range(0, 1, lo_open=True)),
    ("scaling.confidence", Range(0, 1, lo_open=True, hi_open=True)), ("scaling.a_step", POSITIVE),
    ("scaling.n_cmid", COUNT), ("scaling.min_points", Range(2)),
    ("logger.completions_rows", COUNT), ("logger.completions_max_mb", POSITIVE),
    ("train.eval_every", COUNT), ("train.ckpt_every", COUNT), ("train.log_every", COUNT),
    ("train.callbacks.*", ANY),  # a callback's own arguments: the callback checks them
    ("trainer.threads", Range(-1)),  # -1 = the cores other processes leave free, 0 = every core
    ("trainer.dist_timeout_s", POSITIVE),
]


def range_of(key: str) -> Range:
    return next((r for pattern, r in RANGES if fnmatch.fnmatchcase(key, pattern)), DEFAULT)


def numbers(cfg, prefix: str = ""):
    """(dotted key, value) of every int / float in `cfg` (bools excluded; an interpolation as what it resolves to)."""
    from omegaconf import DictConfig, ListConfig

    if isinstance(cfg, DictConfig):
        items = ((str(k), cfg._get_node(k)) for k in cfg.keys())
    elif isinstance(cfg, ListConfig):
        items = ((str(i), cfg._get_node(i)) for i in range(len(cfg)))
    else:
        return
    for k, node in items:
        key = f"{prefix}{k}"
        if isinstance(node, (DictConfig, ListConfig)):
            yield from numbers(_resolved(node), key + ".")
            continue
        v = _resolved(node)
        v = v._value() if v is not None else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            yield key, v


def _resolved(node):
    """The node an interpolation points at (None if it cannot be resolved here, e.g. a missing env var)."""
    if not node._is_interpolation():
        return node
    try:
        return node._dereference_node()
    except Exception:  # noqa: BLE001  (not a number this walk can check; the run resolves it later)
        return None


def check_numbers(cfg) -> None:
    """NaN / inf and out-of-range numbers, refused naming the key (`paper:` notes are not settings)."""
    for key, v in numbers(cfg):
        if key.split(".")[0] in ("paper", "report", "hydra"):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{key} must be a finite number, got {v}")
        r = range_of(key)
        if v not in r:
            raise ValueError(f"{key} must be {r.describe()}, got {v!r}")


def check_model(cfg) -> None:
    """The tiny model's shape (attention heads dividing the width), dtype, and the quant names."""
    from rlx.models import DTYPES
    from rlx.quant.formats import FORMATS
    from rlx.quant.linear import KERNELS

    m = cfg.model
    if m.dtype not in DTYPES:
        raise ValueError(f"model.dtype: '{m.dtype}' is not one of {sorted(DTYPES)}")
    if m.source == "tiny":
        if m.hidden_size % m.num_heads:
            raise ValueError(f"model.num_heads={m.num_heads} must divide model.hidden_size={m.hidden_size} "
                             f"(head_dim = hidden_size / num_heads)")
        if (m.hidden_size // m.num_heads) % 2:
            raise ValueError(f"model.hidden_size / model.num_heads = {m.hidden_size // m.num_heads} must be even "
                             f"(rotary embeddings rotate pairs of head dimensions)")
        if m.num_heads % m.num_kv_heads:
            raise ValueError(f"model.num_kv_heads={m.num_kv_heads} must divide model.num_heads={m.num_heads} "
                             f"(grouped-query attention)")
    if cfg.quant.format != "none" and cfg.quant.format not in FORMATS:
        raise ValueError(f"quant.format: '{cfg.quant.format}' is not one of {['none', *sorted(FORMATS)]}")
    if cfg.quant.kernel not in KERNELS:
        raise ValueError(f"quant.kernel: '{cfg.quant.kernel}' is not one of {list(KERNELS)}")


def check_fits(cfg, task) -> None:
    """The tiny model's context holds the task's longest prompt plus the longest completion or SFT target."""
    if cfg.model.source != "tiny":
        return
    from rlx.models.config import chat_template_text
    from rlx.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    examples = list(task.train) + [e for ex in task.eval_sets.values() for e in ex]
    if not examples:
        return
    if cfg.model.get("chat_template"):
        tok.chat_template = chat_template_text(cfg.model.chat_template)
    r = cfg.rollout
    tools = getattr(task, "tools", None)  # an environment's tool schemas, which its template renders in the prompt
    prompt = max(_prompt_tokens(tok, e, cfg.model.chat_prompts, tools) for e in examples)
    completion = max(r.max_new_tokens + (r.interrupt.answer_tokens + len(r.interrupt.phrase) if r.interrupt.enabled
                                         else 0), r.eval_max_new_tokens or 0)
    sft = 1 + max(len(tok(e.target, add_special_tokens=False).input_ids) for e in task.train) if task.train else 0
    sft += len(cfg.model.sft.demo_prefix) if cfg.model.sft.demo_prefix_frac > 0 else 0
    need = prompt + max(completion, sft)
    if need > cfg.model.max_position_embeddings:
        raise ValueError(f"model.max_position_embeddings={cfg.model.max_position_embeddings} is shorter than the "
                         f"longest prompt ({prompt} tokens) plus the longest completion ({max(completion, sft)}: "
                         f"rollout.max_new_tokens / eval_max_new_tokens, or an SFT target + eos); set it >= {need}")


def _prompt_tokens(tok, e, chat_prompts: bool, tools=None) -> int:
    """Tokens of a prompt as the policy will see it (a chat prompt rendered by the chat template, with `tools`)."""
    messages = e.messages if e.messages is not None else (
        [{"role": "user", "content": e.prompt}] if chat_prompts else None)
    text = e.prompt
    if messages is not None and getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, tools=tools or None)
    return len(tok(text, add_special_tokens=False).input_ids)
