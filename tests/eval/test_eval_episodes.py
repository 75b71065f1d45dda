"""The evaluation's per-problem rows keep a multi-turn episode whole (`episode`) only where the row holds tokens
the policy did not sample: rows without any stay as single-turn rows are."""

from types import SimpleNamespace

import torch

from rlx.eval.evaluate import _episodes


class Tok:
    def decode(self, ids):
        return "".join(chr(ord("a") + i) for i in ids)


def test_only_rows_with_environment_tokens_get_a_transcript():
    # row 0: policy 'ab', environment 'c', policy 'd'; row 1: policy 'ab' only (padding after); no row: forced None
    batch = SimpleNamespace(texts=["d", "ab"],
                            completion_ids=torch.tensor([[0, 1, 2, 3], [0, 1, 9, 9]]),
                            completion_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
                            forced=torch.tensor([[False, False, True, False], [False, False, False, False]]))
    engine = SimpleNamespace(tok=Tok())
    assert _episodes(engine, batch) == ["ab[[c]]d", None]
    batch.forced = None  # a single-turn engine's batch
    assert _episodes(engine, batch) == [None, None]
