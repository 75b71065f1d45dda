"""glibc's mmap threshold (`trainer.malloc_mmap_threshold_mb`), for peak RSS on CPU (docs/lean.md, "Memory: 32
sequences in one micro-batch"): fixed, large freed blocks go back to the kernel instead of staying resident."""

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
