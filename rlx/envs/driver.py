"""Multi-turn rollouts on any rlx engine: episodes with environments, returned as one RolloutBatch.

    run_episodes(engine, make_env, prompts, n, sampling, generator, budget) -> Rollout(batch, rewards, episodes)

Each turn is one `engine.generate(contexts, 1, ...)` call over the episodes still running, every context given
as token ids (prompt + every turn so far): nothing is decoded and encoded again. A turn's policy tokens are kept
as sampled, up to the first stop string (given to the engine as SamplingParams.stop) and the episode's budget.

The batch (rlx.rollout.base.RolloutBatch, rows prompt-major like engine.generate):
  prompt_ids / prompt_mask   [N, P]  the prompt each episode started from (env.reset's)
  completion_ids             [N, T]  every turn in order: policy tokens and environment replies
  completion_mask            [N, T]  1 on every turn's tokens: the trainer forwards them all
  forced                     [N, T]  True on environment tokens, so `loss_mask` (= completion_mask and
                                     not forced, what rlx.algo's loss reads) is 1 on policy tokens only
  logprobs / entropy         [N, T]  the engine's, on policy tokens (0 on environment tokens)
  token_version              [N, T]  the engine's, on policy tokens; an environment token carries the
                                     version of the policy token before it (-1 on padding)
  version                    [N]     the oldest policy token's
  truncated                  [N]     the episode ended by a budget (tokens, turns, a turn's length)
  texts                      [N]     the last policy turn's text: the answer the task's rewards score
Rewards the environment gave per turn are summed per episode (`Rollout.rewards` [N]).

Budgets (`Budget`) and seeds (an episode's tokens depend on its seed alone): docs/envs.md, "Budgets", "Seeds".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlx.envs.base import Episode, Turn
from rlx.rollout.base import RolloutBatch, SamplingParams, draw_seeds


@dataclass(frozen=True)
class Budget:
    """An episode's limits: policy turns, tokens per policy turn (0 = the remaining budget), tokens per reply."""

    max_turns: int = 4
    turn_tokens: int = 0
    reply_tokens: int = 32

    @classmethod
    def from_config(cls, cfg) -> "Budget":
        return cls(int(cfg.max_turns), int(cfg.turn_tokens), int(cfg.reply_tokens))


@dataclass
class Rollout:
    batch: RolloutBatch
    rewards: torch.Tensor  # [N] the environment's rewards summed over each episode
    episodes: list[Episode]


_MASK = (1 << 31) - 1


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of an episode's turn: its own seed for turn 0, a mix of (seed, turn) after."""
    if turn == 0:
        return int(seed)
    x = (int(seed) * 0x9E3779B97F4A7C15 + turn * 0xBF58476D1CE4E5B9) & (2**64 - 1)  # splitmix64's finalizer
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return (x ^ (x >> 31)) % _MASK


def stop_cut(tok, ids: list[int], stops: tuple[str, ...]) -> int | None:
    """The fewest leading tokens of `ids` whose text holds a stop string, None if the whole does not
    (binary search: a longer prefix's text extends a shorter one's)."""
    if not stops or not any(s in tok.decode(ids) for s in stops):
        return None
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in tok.decode(ids[:mid]) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _prompt_ids(tok, prompts: list) -> list[list[int]]:
    """As the engines read them (rlx.rollout.base.encode_prompts): text without special tokens, or ids kept."""
    return [list(p) if isinstance(p, (list, tuple)) else tok(p, add_special_tokens=False).input_ids for p in prompts]


def _decode(tok, ids: list[int], stop_ids: set[int]) -> str:
    return tok.decode([t for t in ids if t not in stop_ids], skip_special_tokens=True)


def run_episodes(engine, make_env, prompts: list, n: int, sampling: SamplingParams, generator, budget: Budget,
                 seeds: list[int] | None = None, examples: list | None = None) -> Rollout:
    """n episodes per prompt (text or token ids), rows prompt-major; `make_env()` -> a fresh Environment
    per episode; `examples[i]` (optional) is what prompt i's environments get at reset."""
    tok = engine.tok
    N = len(prompts) * n
    seeds = draw_seeds(generator, N) if seeds is None else [int(s) for s in seeds]
    if len(seeds) != N:
        raise ValueError(f"run_episodes: {len(seeds)} seeds for {N} episodes")
    envs = [make_env() for _ in range(N)]
    stops = tuple(envs[0].stop_strings) if envs else ()
    # the engine ends a turn at a stop string (SamplingParams.stop) instead of decoding on to its budget;
    # the cut below stays as the check (an engine that stops later, or not at all, is cut there too)
    turn_sampling = sampling.but(stop=tuple(dict.fromkeys((*sampling.stop, *stops))))
    stop_ids = {tok.eos_token_id, *sampling.stop_token_ids}
    ids = _prompt_ids(tok, prompts)
    episodes = [Episode(envs[r].reset(list(ids[r // n]), examples[r // n] if examples else None)) for r in range(N)]
    total = int(sampling.max_tokens)
    active = list(range(N))
    for turn in range(budget.max_turns):
        if not active:
            break
        limit = {r: min(total - episodes[r].length, budget.turn_tokens or total) for r in active}
        out = engine.generate([episodes[r].context() for r in active], 1, turn_sampling.but(max_tokens=max(limit.values())),
                              generator, seeds=[turn_seed(seeds[r], turn) for r in active])
        still = []
        for j, r in enumerate(active):
            ep, env = episodes[r], envs[r]
            turn_ids, by_length = _policy_turn(ep, out, j, limit[r], tok, stops, stop_ids)
            step = env.step(turn_ids)
            ep.reward += float(step.reward)
            for k, v in step.info.items():
                ep.info[k] = ep.info.get(k, 0.0) + float(v)
            if step.done:
                ep.truncated = by_length
                continue
            reply = list(step.reply)[: budget.reply_tokens]
            if turn == budget.max_turns - 1 or ep.length + len(reply) >= total:
                ep.truncated = True  # out of turns, or no room left for the policy after the reply
                continue
            if reply:
                ep.turns.append(Turn("env", reply))
            still.append(r)
        active = still
    return Rollout(_batch(episodes, len(prompts), n, tok.pad_token_id),
                   torch.tensor([ep.reward for ep in episodes], dtype=torch.float32), episodes)


def _policy_turn(ep: Episode, out: RolloutBatch, j: int, limit: int, tok, stops, stop_ids) -> tuple[list[int], bool]:
    """Append row j of the engine's batch to `ep` as a policy turn, cut at the first stop string and at
    `limit` tokens; returns (its ids, whether it ended by length rather than eos or a stop string)."""
    L = int(out.completion_mask[j].sum())
    row = out.completion_ids[j, :L].tolist()
    at = stop_cut(tok, row, stops)
    if at is not None and at <= limit:  # ended at the stop string (a tool call)
        cut, by_length = at, False
    elif L > limit:  # sampled past this episode's budget (the call served longer ones too)
        cut, by_length = limit, True
    else:  # ended at eos / a stop id, or at max_tokens
        cut, by_length = L, bool(out.truncated[j])
    text = out.texts[j] if cut == L else _decode(tok, row[:cut], stop_ids)
    ent = out.entropy[j, :cut].tolist() if out.entropy is not None else None
    if out.token_version is not None:
        versions = out.token_version[j, :cut].tolist()
    else:
        versions = [int(out.version[j]) if out.version is not None else -1] * cut
    ep.turns.append(Turn("policy", row[:cut], out.logprobs[j, :cut].tolist(), versions, ent, text))
    return row[:cut], by_length


def _batch(episodes: list[Episode], n_prompts: int, n: int, pad_id: int) -> RolloutBatch:
    """Episodes -> one RolloutBatch (the columns in the module docstring)."""
    N = len(episodes)
    P = max(len(ep.prompt_ids) for ep in episodes)
    T = max(1, max(ep.length for ep in episodes))
    prompt_ids = torch.full((N, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((N, P), dtype=torch.long)
    comp = torch.full((N, T), pad_id, dtype=torch.long)  # [N, T]
    cmask = torch.zeros((N, T), dtype=torch.long)
    forced = torch.zeros((N, T), dtype=torch.bool)
    logp = torch.zeros((N, T), dtype=torch.float32)
    tver = torch.full((N, T), -1, dtype=torch.long)
    has_ent = all(t.entropy is not None for ep in episodes for t in ep.turns if t.role == "policy")
    ent = torch.zeros((N, T), dtype=torch.float32) if has_ent else None
    version = torch.zeros(N, dtype=torch.long)
    for r, ep in enumerate(episodes):
        p = len(ep.prompt_ids)
        prompt_ids[r, P - p:] = torch.tensor(ep.prompt_ids, dtype=torch.long)
        prompt_mask[r, P - p:] = 1
        at, last_v = 0, -1
        for t in ep.turns:
            k = len(t.ids)
            sl = slice(at, at + k)
            comp[r, sl] = torch.tensor(t.ids, dtype=torch.long)
            cmask[r, sl] = 1
            if t.role == "policy":
                logp[r, sl] = torch.tensor(t.logprobs, dtype=torch.float32)
                tver[r, sl] = torch.tensor(t.versions, dtype=torch.long)
                if ent is not None:
                    ent[r, sl] = torch.tensor(t.entropy, dtype=torch.float32)
                last_v = t.versions[-1] if k else last_v
            else:
                forced[r, sl] = True
                tver[r, sl] = last_v
            at += k
        pol = [v for t in ep.turns if t.role == "policy" for v in t.versions]
        version[r] = min(pol) if pol else -1
    return RolloutBatch(prompt_ids, prompt_mask, comp, cmask, logp,
                        torch.tensor([ep.truncated for ep in episodes], dtype=torch.bool),
                        torch.arange(n_prompts).repeat_interleave(n), [ep.answer for ep in episodes], ent,
                        version=version, token_version=tver, forced=forced)
