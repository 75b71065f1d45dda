"""A reward that never differs within a group, for the no-signal warning's run (tests/rollout/test_signal_monitor.py)."""


def zero(completions, **kwargs):
    """0.0 for every completion: every group uniform, so no step has a learning signal."""
    return [0.0 for _ in completions]
