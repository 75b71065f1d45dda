"""Held-out evaluation, during training (val/*) and without it: `python -m rlx.eval` (console `rlx-eval`),
docs/eval.md. rlx.eval.evaluate generates and scores (`run_eval`), rlx.eval.source decides what the command
evaluates, rlx.eval.cli builds it as training does, rlx.eval.metrics and rlx.eval.report compute and write.
"""
