"""Sweeps: a paper table's arms run as one Hydra multirun, plainly or predictively (docs/sweeps.md,
docs/predictive.md). `python -m rlx.sweeps NAME [overrides...]` (console script `rlx-sweep`).

Modules, each importing only those above it:
- `spec`: what sweeps/*.yaml say (the sweeps, each one's arm axis and arm files) and the command and
  directory that run one;
- `decisions`: a predictive sweep's decisions on disk (predictive.jsonl / predictive.md), which the
  report (rlx.report) reads;
- `points`: a sweep's ScalingConfig and each arm's pooled evaluations, from its run directories;
- `rule`: the predictive rule (fit each arm, classify the fit, decide who stops);
- `driver_log`: the predictive driver's wandb run;
- `rounds`: the round driver (`run_rounds`) and its resumable state;
- `cli`: the launcher's command line (`main`).
"""
