"""RolloutBatch.select / concat: derived from the column declarations, checked on hand-made batches."""

from dataclasses import fields

import torch

from rlx.rollout.base import RolloutBatch


def _batch(P, T, n, base, forced=None, texts=True):
    ids = torch.arange(n * P).view(n, P) + base
    comp = torch.arange(n * T).view(n, T) + base + 100
    return RolloutBatch(prompt_ids=ids, prompt_mask=torch.ones(n, P, dtype=torch.long), completion_ids=comp,
                        completion_mask=torch.ones(n, T, dtype=torch.long), logprobs=-torch.ones(n, T),
                        truncated=torch.zeros(n, dtype=torch.bool), group=torch.arange(n) + base,
                        texts=[f"t{base}{i}" for i in range(n)] if texts else [], entropy=torch.full((n, T), 0.5),
                        version=torch.full((n,), base), token_version=torch.full((n, T), base), forced=forced,
                        interrupted=None)


def test_concat_pads_prompts_left_and_completions_right_with_each_columns_pad():
    a = _batch(P=2, T=3, n=1, base=10, forced=torch.tensor([[False, True, False]]))
    b = _batch(P=3, T=1, n=2, base=20)  # no forced column: filled with False, not dropped
    c = RolloutBatch.concat([a, b], pad_id=9)
    assert c.prompt_ids[0].tolist() == [9, 10, 11]  # left-padded with the pad id
    assert c.prompt_mask[0].tolist() == [0, 1, 1]
    assert c.completion_ids[1].tolist() == [120, 9, 9]  # right-padded with the pad id
    assert c.completion_mask[1].tolist() == [1, 0, 0]
    assert c.logprobs[2].tolist() == [-1.0, 0.0, 0.0] and c.entropy[2].tolist() == [0.5, 0.0, 0.0]
    assert c.token_version[1].tolist() == [20, -1, -1]  # -1 marks padding
    assert c.forced.tolist() == [[False, True, False], [False, False, False], [False, False, False]]
    assert c.interrupted is None  # no batch has it
    assert c.group.tolist() == [10, 20, 21] and c.version.tolist() == [10, 20, 20]
    assert c.texts == ["t100", "t200", "t201"]


def test_an_optional_column_some_batches_lack_is_dropped_unless_it_fills():
    a, b = _batch(2, 2, 1, 10), _batch(2, 2, 1, 20)
    b.entropy = None
    assert RolloutBatch.concat([a, b]).entropy is None


def test_select_keeps_every_column_of_the_chosen_rows():
    c = RolloutBatch.concat([_batch(2, 2, 2, 10, forced=torch.zeros(2, 2, dtype=torch.bool)), _batch(2, 2, 1, 20)])
    c.interrupted = torch.tensor([False, True, False])
    c.env_reward = torch.tensor([0.5, 1.0, 0.0])
    s = c.select(torch.tensor([False, True, True]))
    for f in fields(RolloutBatch):  # every declared column, none listed by hand
        v, w = getattr(s, f.name), getattr(c, f.name)
        expected = w[1:] if isinstance(w, (list, torch.Tensor)) else w
        assert (v == expected) if isinstance(v, list) else torch.equal(v, expected), f.name
