"""A reward module whose import crashes the reward worker hard (as a broken C extension's segfault does),
while the parent process (which checks the entry before any model is built) imports it fine."""

import multiprocessing
import os
import signal

if multiprocessing.parent_process() is not None:  # inside the spawn worker only
    os.kill(os.getpid(), signal.SIGSEGV)


def score(completions, **kwargs):
    return [1.0 for _ in completions]
