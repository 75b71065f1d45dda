"""Run-level plumbing, one module each (docs/README.md); the bottom layer: it imports no other rlx package. Nothing
is imported here, so reading records (reports, scaling fits) does not pull in torch."""
