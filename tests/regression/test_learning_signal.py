"""The default experiment's learning signal, checked by behaviour, so that it holds on every CPU kind.

The default experiment (conf/config.yaml: model=tiny, task=arith, algo=grpo, rollout=hf, its 300-step SFT
base) runs its first STEPS RL steps through `rlx.train.run`, writing a checkpoint and a completion table
(every row: prompt, completion, reward, advantage) at every step. Three behaviours are then read from its
records, each against a reference of its own:

- the reward pays only what it should: every paid completion states the gold answer, recomputed here from
  the prompt's arithmetic, and a completion that is exactly the gold answer is paid (a reward that always
  pays fails the first);
- the update follows the advantages: the first update raises J = mean_i A_i * mean_t log pi(y_it) on the
  step's own completions (the GRPO objective at ratio 1, `sample` aggregation), recomputed from the policy
  as built and its step-1 checkpoint; a wrong loss sign lowers it by as much;
- the engine samples from the updated policy: at every step the engine's behaviour log-probs equal the
  trainer's (`rollout/logprob_diff`, the conformance bounds), while one update moves them by far more; an
  engine left on older weights (a stale sync) lags by a whole update.

Why behaviours and not a pinned trajectory: the SFT base is chaotic in its rounding. Another CPU kind's
kernels round differently, the 300 SFT steps amplify that into another base (in float64 as in float32: the
difference grows from 1e-16 to tens of percent within 200 steps), and every value of the run moves with it
(issue 61). Every check here compares quantities of one run with each other, with margins of orders of
magnitude over rounding. README.md records the measurements, the margins and the kernel settings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

STEPS = 2
OVERRIDES = [f"train.steps={STEPS}", "train.ckpt_every=1", "trainer.threads=1", "trainer.dtype=fp32",
             "logger.mode=disabled", "train.progress=false", "logger.completions_every=1",
             "logger.completions_rows=4096"]  # every row of the step's batch (128 by default)
FP32_MEAN, FP32_MAX = 1e-4, 2e-3  # |trainer - engine| per token on the same weights (tests/rollout/test_conformance.py)
MIN_CHANGE = 20 * FP32_MEAN  # one update's mean |log-prob change|: an engine one update behind breaks the bound
MIN_GAIN = 1e-4  # J's rise over the first update: ~1000x J's rounding, far below a working update's (README.md)


def gold(prompt: str) -> int:
    """The value of an arith prompt 'a+b-c=' (task=arith), computed here, not read from the task."""
    m = re.fullmatch(r"(\d+(?:[+-]\d+)*)=", prompt.strip())
    assert m, f"not an arith prompt: {prompt!r}"
    return sum(int(t) for t in re.findall(r"[+-]?\d+", m.group(1)))


def wrongly_paid(rows: list[dict]) -> list[str]:
    """The rows whose reward disagrees with the gold answer: paid though their last integer is not the gold,
    or unpaid though the completion is exactly the gold."""
    bad = []
    for r in rows:
        want = gold(r["prompt"])
        ints = re.findall(r"-?\d+", r["completion"])
        stated = ints and int(ints[-1]) == want
        if (r["reward"] > 0 and not stated) or (r["completion"].strip() == str(want) and r["reward"] <= 0):
            bad.append(f"step {r['step']}: {r['prompt']!r} -> {r['completion']!r} (gold {want}) reward {r['reward']}")
    return bad


def encode_rows(tok, rows: list[dict], max_new_tokens: int):
    """Prompt (left-padded) + completion (right-padded) ids of table rows, and the completion mask; a
    completion shorter than the budget ended with eos, which the table's text drops: it is put back.
    # ids, attn [N, P+T]; cmask [N, T]"""
    prompts = [tok(r["prompt"], add_special_tokens=False).input_ids for r in rows]
    comps = [tok(r["completion"], add_special_tokens=False).input_ids for r in rows]
    comps = [c + [tok.eos_token_id] if len(c) < max_new_tokens else c for c in comps]
    P, T = max(map(len, prompts)), max(map(len, comps))
    ids = torch.full((len(rows), P + T), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        ids[i, P - len(p):P], ids[i, P:P + len(c)] = torch.tensor(p), torch.tensor(c, dtype=torch.long)
        attn[i, P - len(p):P + len(c)] = 1
    return ids, attn, attn[:, P:].clone()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_default(tmp_path_factory.mktemp("default") / "run")


@pytest.fixture(scope="module")
def first_update(run):
    return first_update_logprobs(run)


def run_default(run_dir: Path):
    """The default experiment's first STEPS steps: (config, metrics rows, completion rows, run dir)."""
    from rlx.run.records import read_metrics
    from rlx.train import run as train
    from tests.conftest import compose

    cfg = compose(OVERRIDES)
    train(cfg, run_dir)
    table = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    return cfg, read_metrics(run_dir), table, run_dir


def first_update_logprobs(run):
    """Log-probs [N, T] of step 1's completions under the policy as built and after the first update, the
    completion mask and the advantages [N] the update used."""
    from rlx.models import build_policy
    from rlx.models.forward import token_logprobs
    from rlx.run.checkpoint import Checkpointer
    from rlx.tasks import build_task

    cfg, _, table, run_dir = run
    rows = [r for r in table if r["step"] == 1]
    policy, tok = build_policy(cfg, build_task(cfg.task), log=lambda *_: None)  # from the run's cached base
    ids, attn, cmask = encode_rows(tok, rows, cfg.rollout.max_new_tokens)
    with torch.no_grad():
        before = token_logprobs(policy, ids, attn, cmask.shape[1])
        Checkpointer.load(run_dir / "ckpt" / "step_1", policy)
        after = token_logprobs(policy, ids, attn, cmask.shape[1])
    return before, after, cmask.float(), torch.tensor([r["advantage"] for r in rows])


def objective(logp, mask, adv) -> float:
    """J = mean_i A_i * mean_t log pi(y_it): the GRPO objective at ratio 1 (`sample` aggregation)."""
    return float((adv * (logp * mask).sum(1) / mask.sum(1).clamp(min=1)).mean())


@pytest.mark.integration
def test_every_paid_completion_states_the_gold_answer(run):
    cfg, metrics, table, _ = run
    n = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    assert [sum(r["step"] == s for r in table) for s in range(1, STEPS + 1)] == [n] * STEPS
    for s in range(1, STEPS + 1):  # the table is what the update saw
        mean = sum(r["reward"] for r in table if r["step"] == s) / n
        assert abs(mean - next(m for m in metrics if m["step"] == s)["train/reward/mean"]) < 1e-6
    bad = wrongly_paid(table)
    assert not bad, (f"{len(bad)} of {len(table)} completions have a reward their gold answer contradicts (paid "
                     f"without stating it, or unpaid though exactly it):\n  " + "\n  ".join(bad[:8]))


@pytest.mark.integration
def test_the_first_update_raises_the_advantage_weighted_log_prob(first_update):
    before, after, mask, adv = first_update
    gain = objective(after, mask, adv) - objective(before, mask, adv)
    assert gain > MIN_GAIN, (f"the first update moved J = mean A * mean log-prob by {gain:.3g} (needs > {MIN_GAIN}): "
                             f"it does not follow the advantages (a wrong loss sign lowers J)")


@pytest.mark.integration
def test_the_engine_samples_from_the_updated_policy(run, first_update):
    _, metrics, _, _ = run
    before, after, mask, _ = first_update
    change = float(((after - before).abs() * mask).sum() / mask.sum())
    assert change > MIN_CHANGE, f"one update hardly moves the policy ({change:.3g}): a stale engine would go unseen"
    for m in (m for m in metrics if m["step"] >= 1):
        mean, worst = m["rollout/logprob_diff/mean"], m["rollout/logprob_diff/max"]
        assert mean < FP32_MEAN and worst < FP32_MAX, (
            f"step {m['step']}: the engine's log-probs differ from the trainer's by {mean:.3g} on average (max "
            f"{worst:.3g}), one update moves them by {change:.3g}: the engine samples from older weights than the "
            f"trainer's (a stale sync)")


def test_the_checks_tell_right_from_wrong():
    """The references themselves, on hand-made rows and log-probs (no run)."""
    assert gold("3+4-2=") == 5 and gold("0-9-9=") == -18
    rows = [{"step": 1, "prompt": "3+4-2=", "completion": c, "reward": r}
            for c, r in (("5", 1.0), ("x=5", 0.0), ("6", 0.0), ("-18", 0.0))]
    assert wrongly_paid(rows) == []
    always = [{**r, "reward": 1.0} for r in rows]  # a reward that always pays
    assert [b.split(" -> ")[1].split(" ")[0] for b in wrongly_paid(always)] == ["'6'", "'-18'"]
    assert len(wrongly_paid([{**rows[0], "reward": 0.0}])) == 1  # the exact gold unpaid
    mask, adv = torch.ones(2, 3), torch.tensor([1.0, -1.0])
    up = torch.tensor([[0.1, 0.1, 0.1], [-0.1, -0.1, -0.1]])  # the better completion gains log-prob
    assert objective(up, mask, adv) > 0 > objective(-up, mask, adv)

