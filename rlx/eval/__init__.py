"""Held-out evaluation, during training (val/*, rlx.eval.evaluate) and without it: `python -m rlx.eval`
(console `rlx-eval`; rlx.eval.cli), docs/eval.md."""
