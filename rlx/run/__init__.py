"""Run-level plumbing, one module each: the device spec (device), torchrun ranks and their process group
(distributed), checkpoints (checkpoint, checkpoint_weights) and resuming (resume), metrics and wandb
(logging), torch threads (threads), glibc's allocator (allocator), and the reader of finished run
directories (records). The bottom layer: it imports no other rlx package (tests/test_import_cycles.py). Nothing is imported here, so reading records (the
reports, the scaling fits) does not pull in torch."""
