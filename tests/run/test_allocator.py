"""trainer.malloc_mmap_threshold_mb: glibc's mmap threshold, fixed (rlx.run.allocator)."""

import ctypes
import subprocess
import sys
import textwrap

import pytest

from rlx.run.allocator import _libc, check_mmap_threshold

needs_glibc = pytest.mark.skipif(_libc() is None or not hasattr(ctypes.CDLL(None), "mallinfo2"),
                                 reason="glibc's mallopt / mallinfo2")

# In a fresh interpreter (the setting lasts for the process): free one 20 MiB block, which raises glibc's
# dynamic threshold to 20 MiB, then allocate 4 MiB and read how many bytes are in mapped blocks
# (mallinfo2's hblkhd) before and while it lives.
PROBE = textwrap.dedent("""
    import ctypes, sys
    import torch
    from rlx.run.device import resolve
    from omegaconf import OmegaConf
    from rlx.run.config import TrainerConfig

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    resolve(OmegaConf.structured(TrainerConfig(device="cpu", malloc_mmap_threshold_mb=float(sys.argv[1]))))
    big = torch.empty(20 * 2**20, dtype=torch.uint8); big[::4096] = 1; del big
    before = libc.mallinfo2().hblkhd
    x = torch.empty(4 * 2**20, dtype=torch.uint8)
    print(libc.mallinfo2().hblkhd - before)
""")


def _mapped_growth(mib: float) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, str(mib)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.integration
@needs_glibc
def test_a_fixed_threshold_keeps_a_4_mib_block_mapped_where_glibcs_risen_threshold_puts_it_on_the_heap():
    assert _mapped_growth(0) == 0  # glibc's rule: the threshold rose to 20 MiB, 4 MiB comes from the heap
    assert _mapped_growth(1) >= 4 * 2**20  # fixed at 1 MiB: its own mapping, returned on free


@pytest.mark.parametrize("bad", [-1, 33, float("nan")])
def test_a_threshold_glibc_would_refuse_names_the_key(bad):
    with pytest.raises(ValueError, match="trainer.malloc_mmap_threshold_mb"):
        check_mmap_threshold(bad)
