"""Run-level plumbing, one module each: the device spec (device), torchrun ranks and data parallelism
(distributed), checkpoints (checkpoint, checkpoint_weights) and resuming (resume), metrics and wandb
(logging), completion tables (completions), torch threads (threads), glibc's allocator (allocator), and
the reader of finished run directories (records). Nothing is imported here, so reading records (the
reports, the scaling fits) does not pull in torch."""
