"""Sweeps: a paper table's arms run as one Hydra multirun, plainly or predictively (docs/sweeps.md,
docs/predictive.md). `python -m rlx.sweeps NAME [overrides...]` (console script `rlx-sweep`). Modules: `spec`
(sweeps/*.yaml), `decisions` (predictive.jsonl), `points`, `rule`, `driver_log`, `rounds` (the driver), `cli`."""
