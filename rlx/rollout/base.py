"""The rollout-engine interface (docs/engine.md): an engine owns a copy of the policy weights and returns the log-probs
of the distribution it really sampled from. `export_weights` (trainer side) and `load_weights` (engine side) split a
sync, so a generator thread can take new weights between decode steps (PipelineRL's in-flight update)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch


@dataclass(frozen=True)
class SamplingParams:
    """What to sample (checked as rollout.*): temperature 0 = greedy, top_k 0 = off; `stop`: stop strings
    (docs/engine.md, "Stop strings"): a row ends with the token after which its text holds one."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 8
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()

    def but(self, **changes) -> "SamplingParams":
        return replace(self, **changes)

    @classmethod
    def from_config(cls, cfg) -> "SamplingParams":
        return cls(float(cfg.temperature), float(cfg.top_p), int(cfg.top_k), int(cfg.max_new_tokens),
                   tuple(int(t) for t in cfg.stop_token_ids))


PAD_ID = "pad_id"  # a column padded with the tokenizer's pad id (concat's argument)


def _col(layout: str, pad=0, optional: bool = False, fill: bool = False):
    """A RolloutBatch column: `layout` row [N], left / right [N, P] / [N, T] (padded with `pad`) or list; concat
    drops an `optional` one some batches lack, or fills it with `pad` (`fill`)."""
    meta = {"layout": layout, "pad": pad, "fill": fill}
    if layout == "list":
        return field(default_factory=list, metadata=meta)
    return field(default=None, metadata=meta) if optional else field(metadata=meta)


def _stack(f, batches: list, width: dict, pad_id: int):
    """One column of RolloutBatch.concat."""
    layout, pad = f.metadata["layout"], f.metadata["pad"]
    vals = [getattr(b, f.name) for b in batches]
    if layout == "list":
        return sum(vals, [])
    if all(v is None for v in vals) or (any(v is None for v in vals) and not f.metadata["fill"]):
        return None
    ref = next(v for v in vals if v is not None)
    if any(v is None for v in vals):  # filled: [N] or [N, T] of the pad value, the present ones' dtype
        shape = lambda b: b.completion_ids.shape if layout == "right" else (len(b),)  # noqa: E731
        vals = [v if v is not None else torch.full(shape(b), pad, dtype=ref.dtype) for v, b in zip(vals, batches)]
    if layout == "row":
        return torch.cat(vals)
    value = pad_id if pad == PAD_ID else pad
    side = (lambda n: (n, 0)) if layout == "left" else (lambda n: (0, n))
    return torch.cat([torch.nn.functional.pad(v, side(width[layout] - v.shape[1]), value=value) for v in vals])


@dataclass
class RolloutBatch:
    """G completions for each of B prompts, flattened to N = B*G rows (prompt-major: row i is prompt i // G)."""

    prompt_ids: torch.Tensor = _col("left", PAD_ID)  # [N, P] left-padded prompt tokens
    prompt_mask: torch.Tensor = _col("left", 0)  # [N, P] 1 on real prompt tokens
    completion_ids: torch.Tensor = _col("right", PAD_ID)  # [N, T] right-padded completion tokens (eos included when emitted)
    completion_mask: torch.Tensor = _col("right", 0)  # [N, T] 1 on completion tokens up to and including eos
    logprobs: torch.Tensor = _col("right", 0.0)  # [N, T] log-probs of the sampled tokens under the sampling policy (0 on padding)
    truncated: torch.Tensor = _col("row")  # [N] bool: hit max_new_tokens without eos
    group: torch.Tensor = _col("row")  # [N] long: index of the prompt each row belongs to
    texts: list[str] = _col("list")  # decoded completions (eos stripped)
    entropy: torch.Tensor | None = _col("right", 0.0, optional=True)  # [N, T] token entropy of the sampling distribution (hf only)
    version: torch.Tensor | None = _col("row", optional=True)  # [N] long: policy version of the row's oldest token
    token_version: torch.Tensor | None = _col("right", -1, optional=True)  # [N, T] long: policy version that sampled each token (-1 on padding)
    forced: torch.Tensor | None = _col("right", False, optional=True, fill=True)  # [N, T] bool: tokens the engine inserted, not sampled (interruption phrase)
    interrupted: torch.Tensor | None = _col("row", False, optional=True, fill=True)  # [N] bool: hit the thinking budget and was told to answer
    env_reward: torch.Tensor | None = _col("row", 0.0, optional=True, fill=True)  # [N] float: an environment's per-turn rewards summed over the episode (rlx.envs), added to the task's

    @property
    def input_ids(self) -> torch.Tensor:  # [N, P+T]
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:  # [N, P+T]
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    @property
    def lengths(self) -> torch.Tensor:  # [N]
        return self.completion_mask.sum(1)

    @property
    def loss_mask(self) -> torch.Tensor:  # [N, T] completion tokens the policy sampled (forced ones excluded)
        if self.forced is None:
            return self.completion_mask
        return self.completion_mask * (~self.forced).to(self.completion_mask.dtype)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def select(self, rows: torch.Tensor) -> "RolloutBatch":
        """Keep the given rows (a bool mask or index tensor); `group` keeps its original prompt ids."""
        idx = rows.nonzero(as_tuple=True)[0] if rows.dtype == torch.bool else rows
        picked = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.metadata["layout"] == "list":
                picked[f.name] = [v[i] for i in idx.tolist()] if v else []
            else:
                picked[f.name] = None if v is None else v[idx]
        return RolloutBatch(**picked)

    @classmethod
    def concat(cls, batches: list["RolloutBatch"], pad_id: int = 0) -> "RolloutBatch":
        """Stack batches row-wise, prompts left-, completions right-padded (`pad_id` fills token ids)."""
        if len(batches) == 1:
            return batches[0]
        width = {"left": max(b.prompt_ids.shape[1] for b in batches),
                 "right": max(b.completion_ids.shape[1] for b in batches)}
        return cls(**{f.name: _stack(f, batches, width, pad_id) for f in fields(cls)})


def draw_seeds(generator: torch.Generator, n: int) -> list[int]:
    """One sampling seed per row: its samples depend on it alone, so N ranks sample what one process would."""
    return torch.randint(2**31 - 1, (n,), generator=generator).tolist()

def encode_prompts(tok, prompts: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and mask (a prompt is text, or a list of token ids kept as is).  # [B, P] each"""
    enc = [list(p) if isinstance(p, (list, tuple)) else tok(p, add_special_tokens=False).input_ids for p in prompts]
    P = max(len(e) for e in enc)
    ids = torch.full((len(enc), P), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(enc), P), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, P - len(e):] = torch.tensor(e, dtype=torch.long)
        mask[i, P - len(e):] = 1
    return ids, mask


def decode(tok, row: torch.Tensor, m: torch.Tensor, stop_ids: set[int]) -> str:
    """A completion's text: its masked tokens but the stop ids, special tokens skipped."""
    toks = [t for t, keep in zip(row.tolist(), m.tolist()) if keep and t not in stop_ids]
    return tok.decode(toks, skip_special_tokens=True)


def sampled_batch(tok, ids: torch.Tensor, mask: torch.Tensor, n: int, rows: list, stop_ids: set[int]) -> RolloutBatch:
    """The batch of what vLLM sampled: `rows` (token ids, log-probs, truncated), n per prompt.  # [B*n, T]"""
    N, T = len(rows), max(1, max(len(r[0]) for r in rows))
    comp = torch.full((N, T), tok.pad_token_id, dtype=torch.long)  # [N, T]
    cmask = torch.zeros((N, T), dtype=torch.long)
    logp = torch.zeros((N, T), dtype=torch.float32)
    for r, (toks, lps, _) in enumerate(rows):
        comp[r, : len(toks)] = torch.tensor(toks, dtype=torch.long)
        cmask[r, : len(toks)] = 1
        logp[r, : len(toks)] = torch.tensor(lps, dtype=torch.float32)
    texts = [decode(tok, row, m, stop_ids) for row, m in zip(comp, cmask)]
    truncated = torch.tensor([bool(r[2]) for r in rows], dtype=torch.bool)
    group = torch.arange(ids.shape[0]).repeat_interleave(n)
    return RolloutBatch(ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0), comp, cmask, logp, truncated,
                        group, texts, None)


class RolloutEngine:
    """Owns a copy of the policy weights and samples from it. Subclasses register in ENGINES."""

    version: int = 0  # policy version of the weights the engine holds
    between_steps = None  # optional callable run before every decode step (in-flight weight updates)

    @classmethod
    def check_config(cls, cfg) -> None:
        """Refuse, before any model is built, a run config this engine cannot serve."""

    def export_weights(self, policy):
        """Trainer side: a detached copy of what `load_weights` needs of the policy (its current weights)."""
        raise NotImplementedError

    def load_weights(self, payload, version: int) -> None:
        """Engine side: take exported weights; tokens sampled from now on carry `version`."""
        raise NotImplementedError

    def sync(self, policy, version: int) -> None:
        """Bring the engine's weights to the trainer's policy (after an update or a NExt jump)."""
        self.load_weights(self.export_weights(policy), version)

    def noise_target(self):
        """The module whose norm weights AQN perturbs while this engine samples."""
        raise NotImplementedError

    def generate(self, prompts: list[str] | list[list[int]], n: int, sampling: SamplingParams,
                 generator: torch.Generator, seeds: list[int] | None = None) -> RolloutBatch:
        """n samples per prompt (text or ids), prompt-major, on the CPU; row i seeded by seeds[i]."""
        raise NotImplementedError

    def metrics(self) -> dict:
        """The engine's own figures of the last step (the server engine: sync time, canary)."""
        return {}

    def sleep(self) -> None:
        """Free device memory while the trainer updates (vLLM sleep mode); the next sync wakes it."""

    def close(self) -> None:
        """Release the engine's resources (vLLM memory); the engine is unusable afterwards."""
