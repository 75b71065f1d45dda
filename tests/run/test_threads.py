"""trainer.threads=-1: one torch thread per core the other processes leave free (rlx.run.threads)."""

import pytest
import torch

from rlx.run.threads import ThreadGovernor


class Counters:
    """A fake machine: wall clock, all processes' CPU seconds, this process's CPU seconds."""

    def __init__(self):
        self.t = self.busy = self.own = 0.0

    def run(self, seconds: float, ours: float, others: float):  # cores busy during `seconds`
        self.t += seconds
        self.own += ours * seconds
        self.busy += (ours + others) * seconds


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("others,want", [
    (0.0, 4),  # idle: every core
    (0.5, 4),  # another job using half a core leaves it ours more often than not
    (1.0, 3),  # one busy process takes a core
    (2.7, 1),  # 0.7 of a core counts as taken: 4 - 3
    (9.0, 1),  # never fewer than one
])
def test_threads_follow_the_free_cores(others, want, restore_threads):
    c = Counters()
    g = ThreadGovernor(cores=4, busy=lambda: c.busy, own=lambda: c.own, clock=lambda: c.t, limit=4)
    c.run(2.0, ours=1.0, others=others)  # our own work (spinning threads included) is not "others"
    assert g.others() == pytest.approx(others)
    assert g.tick() == want == torch.get_num_threads()


def test_a_job_that_ends_gives_its_core_back(restore_threads):
    c = Counters()
    g = ThreadGovernor(cores=2, busy=lambda: c.busy, own=lambda: c.own, clock=lambda: c.t, limit=2)
    c.run(1.0, ours=1.0, others=1.0)
    assert g.tick() == 1
    c.run(1.0, ours=1.0, others=0.0)  # measured over the interval since the last tick only
    assert g.tick() == 2


def test_no_counters_keeps_the_count(restore_threads):
    torch.set_num_threads(1)
    g = ThreadGovernor(cores=2, busy=lambda: None)  # not Linux: nothing to measure
    assert g.others() is None and g.tick() == 1


def test_real_counters_give_a_count_within_the_cores(restore_threads):
    g = ThreadGovernor.started(sample_s=0.2)
    assert 1 <= g.threads == torch.get_num_threads() <= g.cores
    others = g.others()
    assert others is None or others >= 0.0


def test_threads_below_minus_one_are_refused():
    from omegaconf import OmegaConf

    from rlx.run.config import TrainerConfig
    from rlx.run.device import resolve

    with pytest.raises(ValueError, match="trainer.threads"):
        resolve(OmegaConf.structured(TrainerConfig(device="cpu", threads=-2)))


def test_share_splits_the_cores_among_local_ranks_and_honours_omp(monkeypatch, restore_threads):
    import rlx.run.threads as T

    monkeypatch.setattr(T, "_cores", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # torchrun, 8 ranks on one 16-core node
    assert T.share() == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a user's (or torchrun's) own setting is a ceiling
    assert T.share() == 1
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert T.share() == 16
    c = Counters()
    g = ThreadGovernor(cores=16, busy=lambda: c.busy, own=lambda: c.own, clock=lambda: c.t, limit=2)
    c.run(1.0, ours=1.0, others=0.0)  # an idle node: still only this rank's share
    assert g.tick() == 2


@pytest.mark.integration
def test_children_count_as_our_own_work():
    """A busy child (a reward worker) is this process's work, not another job's."""
    import subprocess
    import sys
    import time

    from rlx.run.threads import _own_s

    before = _own_s()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"])
    time.sleep(1.0)
    during = _own_s()
    child.wait()
    assert during - before > 0.2  # the running child's CPU time is in (os.times alone would miss it)
