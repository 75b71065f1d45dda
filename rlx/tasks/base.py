"""Task interface: seeded train / held-out splits (and named eval sets), a deterministic resumable sampler, and
scoring through named reward functions (registered: rlx.tasks.rewards; by import path: rlx.tasks.user_rewards)."""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field

from rlx.tasks.rewards import BATCH, REWARDS
from rlx.tasks.user_rewards import UserRewards, check_reward_specs, is_import_path, load_reward, required_columns

TAKES_TRUNCATED = {"stated_answer"}  # batch rewards that read a completion differently when the budget cut it


@dataclass(frozen=True)
class Example:
    key: str  # stable id (curriculum bookkeeping, disjointness checks)
    prompt: str  # what the policy sees
    answer: str  # gold final answer (what rewards compare against)
    solution: str = ""  # SFT target completion (defaults to the answer)
    # the dataset's other columns (what import-path reward functions get as keyword arguments)
    columns: dict = field(default_factory=dict, hash=False)
    messages: list | None = field(default=None, hash=False)  # a chat prompt; `prompt` is its rendering
    # where `Task.sample` drew it in the training stream (epoch * len(train) + position; -1: not drawn):
    # the prompt ledger (prompts.jsonl) and async resume count prompts by it
    index: int = field(default=-1, hash=False, compare=False)

    def __post_init__(self):
        if not self.columns:  # a synthetic example: its one column besides the prompt is the answer
            object.__setattr__(self, "columns", {"answer": self.answer})

    @property
    def target(self) -> str:
        return self.solution or self.answer


class Task:
    """A verifiable task. Subclasses fill `train` and `eval` (disjoint) in `__init__`."""

    name = "task"

    def __init__(self, cfg):
        self.cfg = cfg
        self.train: list[Example] = []
        self.eval: list[Example] = []  # every held-out example (all eval sets)
        self.eval_sets: dict[str, list[Example]] = {}  # name -> examples (filled by rlx.tasks.files.load_eval_sets)
        self.names = check_reward_specs(cfg.rewards)  # {task.rewards entry: logged name}
        self.weights = {self.names[spec]: w for spec, w in cfg.rewards.items()}
        user = [spec for spec in cfg.rewards if is_import_path(spec)]
        self.user_rewards = UserRewards(user, cfg.get("reward_timeout_s", 5.0)) if user else None
        self.verifier = None
        self.chat = False  # chat prompts rendered (render_chat): stated_answer's loose reading defaults on
        if "math_verify" in cfg.rewards or "stated_answer" in cfg.rewards:
            from rlx.tasks.verify import configure

            self.verifier = configure(cfg.get("reward_timeout_s", 5.0))
        self._epoch = 0
        self._pos = 0
        self._order: list[int] | None = None
        self._shuffle_seed = 0

    # ---- eval sets, chat prompts, columns (called by build_task / before the model is built) ---------
    @property
    def named_eval(self) -> bool:
        """Whether task.eval names the eval sets (metrics val/<name>/...) or the one held-out split is used."""
        return bool(self.cfg.get("eval"))

    def check_columns(self) -> None:
        """Each import-path reward's required parameters are columns of every split (else: which one lacks it)."""
        splits = {"the training split": self.train, **{f"eval set '{n}'": ex for n, ex in self.eval_sets.items()}}
        for spec in self.cfg.rewards:
            if not is_import_path(spec):
                continue
            need = required_columns(load_reward(spec))
            for where, examples in splits.items():
                have = set(examples[0].columns) if examples else set()
                missing = [c for c in need if c not in have]
                if missing:
                    raise ValueError(f"task.rewards: '{spec}' needs the column(s) {missing}, which {where} lacks "
                                     f"(its columns besides the prompt: {sorted(have)})")

    def render_chat(self, tok, all_prompts: bool = False) -> None:
        """Chat prompts -> text through the tokenizer's chat template (`all_prompts`: string prompts too)."""
        if all_prompts:
            if not getattr(tok, "chat_template", None):
                raise ValueError("model.chat_prompts=true but the model's tokenizer has no chat template; set "
                                 "model.chat_template (a Jinja template) or model.chat_prompts=false")

            def as_chat(examples: list[Example]) -> list[Example]:
                return [e if e.messages is not None else dataclasses.replace(
                    e, messages=[{"role": "user", "content": e.prompt}]) for e in examples]

            self.train, self.eval = as_chat(self.train), as_chat(self.eval)
            self.eval_sets = {name: as_chat(ex) for name, ex in self.eval_sets.items()}
        chat = [e for e in self.train + self.eval if e.messages is not None]
        if not chat:
            return
        self.chat = True
        if not getattr(tok, "chat_template", None):
            raise ValueError(f"task: the prompts in column '{self.cfg.question_field}' are chat messages but the "
                             f"model's tokenizer has no chat template; set model.chat_template (a Jinja template, "
                             f"as in a tokenizer_config.json) or use string prompts")

        def render(examples: list[Example]) -> list[Example]:
            return [e if e.messages is None else dataclasses.replace(e, prompt=tok.apply_chat_template(
                e.messages, add_generation_prompt=True, tokenize=False)) for e in examples]

        self.train = render(self.train)
        self.eval_sets = {name: render(ex) for name, ex in self.eval_sets.items()}
        self.eval = render(self.eval)

    # ---- sampling -------------------------------------------------------------------------
    def set_seed(self, seed: int) -> None:
        self._shuffle_seed = seed
        self._order = None

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.train)))
        random.Random(f"{self._shuffle_seed}-{epoch}").shuffle(order)
        return order

    def _epoch_order(self) -> list[int]:
        if self._order is None:
            self._order = self._shuffled(self._epoch)
        return self._order

    def sample(self, n: int, skip=None) -> list[Example]:
        """Next `n` training prompts in a seeded per-epoch shuffle; `skip(key)` retires prompts."""
        out: list[Example] = []
        scanned_since_pick = 0
        while len(out) < n:
            order = self._epoch_order()
            if self._pos >= len(order):
                self._epoch, self._pos, self._order = self._epoch + 1, 0, None
                continue
            ex = self.train[order[self._pos]]
            index = self._epoch * len(self.train) + self._pos
            self._pos += 1
            if skip is not None and skip(ex.key):
                scanned_since_pick += 1
                if scanned_since_pick > 2 * len(self.train):  # a full epoch boundary can hide the last live prompt
                    raise RuntimeError("every training prompt is retired: nothing left to sample")
                continue
            scanned_since_pick = 0
            out.append(dataclasses.replace(ex, index=index))
        return out

    def example_at(self, index: int) -> Example:
        """The training example the stream drew at `index` (Example.index): the same seeded shuffle."""
        epoch, pos = divmod(int(index), len(self.train))
        order = self._epoch_order() if epoch == self._epoch else self._shuffled(epoch)
        return dataclasses.replace(self.train[order[pos]], index=int(index))

    def state_dict(self) -> dict:
        return {"epoch": self._epoch, "pos": self._pos, "seed": self._shuffle_seed}

    def load_state_dict(self, sd: dict) -> None:
        self._epoch, self._pos, self._shuffle_seed, self._order = sd["epoch"], sd["pos"], sd["seed"], None

    # ---- scoring --------------------------------------------------------------------------
    @property
    def answer_phrase(self) -> bool:
        """stated_answer's loose reading: task.answer_phrase, else on for chat prompts."""
        given = self.cfg.get("answer_phrase")
        return self.chat if given is None else bool(given)

    def reward_options(self, spec: str) -> dict:
        """Keyword arguments a registered reward gets from the task (stated_answer: `loose`)."""
        return {"loose": self.answer_phrase} if spec == "stated_answer" else {}

    def score(self, examples: list[Example], completions: list[str],
              truncated: list[bool] | None = None) -> dict[str, list[float]]:
        """{logged name: unweighted value per (example, completion)}; NaN where an import-path function returned
        None. `truncated` (per completion, cut at the token budget; None: not known) goes to TAKES_TRUNCATED."""
        assert len(examples) == len(completions)
        assert truncated is None or len(truncated) == len(completions)
        out, kwargs = {}, None
        for spec in self.cfg.rewards:
            opts = self.reward_options(spec)
            if truncated is not None and spec in TAKES_TRUNCATED:
                opts = {**opts, "truncated": [bool(t) for t in truncated]}
            if spec in BATCH:
                out[spec] = BATCH[spec](list(completions), examples, **opts)
                continue
            if spec in REWARDS:
                out[spec] = [REWARDS[spec](c, ex, **self.reward_options(spec)) for ex, c in zip(examples, completions)]
                continue
            if kwargs is None:  # TRL's convention: completions, prompts and every column, one list each
                cols = dict.fromkeys(k for e in examples for k in e.columns)
                kwargs = {"completions": list(completions), "prompts": [e.prompt for e in examples],
                          **{k: [e.columns.get(k) for e in examples] for k in cols}}
            out[self.names[spec]] = [math.nan if v is None else v for v in self.user_rewards(spec, kwargs)]
        return out

    def total_reward(self, per_fn: dict[str, list[float]]) -> list[float]:
        """Weighted sum per completion; a NaN (None: does not apply) adds nothing."""
        n = len(next(iter(per_fn.values())))
        return [sum(self.weights[k] * per_fn[k][i] for k in per_fn if not math.isnan(per_fn[k][i])) for i in range(n)]

    @staticmethod
    def reward_metrics(per_fn: dict[str, list[float]]) -> dict[str, float]:
        """train/rewards/<name>: each function's mean over the completions it applies to (NaN if none)."""
        out = {}
        for name, values in per_fn.items():
            applied = [v for v in values if not math.isnan(v)]
            out[f"train/rewards/{name}"] = sum(applied) / len(applied) if applied else math.nan
        return out

    def reward_stats(self) -> dict[str, int]:
        """Bounded-reward events (timeouts, refused inputs, worker errors) since the last call."""
        stats: dict[str, int] = {}
        for worker in (self.verifier, self.user_rewards):
            if worker is not None:
                for k, v in worker.pop_stats().items():
                    stats[f"train/reward_{k}"] = stats.get(f"train/reward_{k}", 0) + v
        return stats

    @staticmethod
    def passed(per_fn: dict[str, list[float]]) -> list[bool]:
        """Whether each completion solved its problem: `correct`, `stated_answer` or `math_verify` 1, else reward>0."""
        checks = [per_fn[name] for name in ("correct", "stated_answer", "math_verify") if name in per_fn]
        n = len(next(iter(per_fn.values())))
        if checks:
            return [any(c[i] >= 1.0 for c in checks) for i in range(n)]
        return [sum(per_fn[k][i] for k in per_fn if not math.isnan(per_fn[k][i])) > 0 for i in range(n)]

