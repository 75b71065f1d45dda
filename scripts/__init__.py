"""One-off cross-checks, run from a checkout as `python -m scripts.NAME` (not installed; nothing in rlx imports them)."""
