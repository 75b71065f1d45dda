"""The C allocator's large-block rule (`trainer.malloc_mmap_threshold_mb`), for peak RSS on CPU.

glibc serves a block at or above its mmap threshold with its own mapping, returned to the kernel on
free; below it, from the heap, whose freed pages stay resident. The threshold starts at 128 KiB and
rises to the size of each mapped block freed (up to 32 MiB), so after the first passes every
activation of a 32-sequence SmolLM2 update (8,000 tokens x 576 x 4 B = 18 MiB) lands on the heap,
and a checkpointed forward leaves gigabytes of freed pages resident. Fixing the threshold (which also
stops it rising) keeps those blocks mapped: the same arithmetic, less memory, more page faults
(measured in docs/lean.md, "Memory: 32 sequences in one micro-batch").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter numbers (malloc.h)
MAX_MIB = 32  # glibc refuses thresholds above HEAP_MAX_SIZE / 2 = 32 MiB on 64-bit


@functools.lru_cache(maxsize=1)
def _libc():
    """This process's C library, where it has glibc's mallopt (None elsewhere)."""
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name) if name else None
    return lib if lib is not None and hasattr(lib, "mallopt") else None


def check_mmap_threshold(mib: float) -> None:
    """Refuse a value this process cannot apply, naming the key (0 leaves the allocator alone)."""
    if mib == 0:
        return
    if not 0 < mib <= MAX_MIB:
        raise ValueError(f"trainer.malloc_mmap_threshold_mb must be 0 (glibc's own rule) or in (0, {MAX_MIB}] MiB, "
                         f"got {mib}")
    if _libc() is None:
        raise ValueError("trainer.malloc_mmap_threshold_mb needs glibc's mallopt, which this platform's C library "
                         "does not have; set it to 0")


def set_mmap_threshold(mib: float) -> None:
    """Fix glibc's mmap threshold at `mib` MiB for the rest of this process (0: do nothing)."""
    check_mmap_threshold(mib)
    if mib == 0:
        return
    if _libc().mallopt(M_MMAP_THRESHOLD, int(mib * 2**20)) != 1:
        raise ValueError(f"trainer.malloc_mmap_threshold_mb={mib}: glibc's mallopt refused it")
