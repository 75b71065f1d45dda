"""One GPU per rank (issue 57): under torchrun / SLURM every rank computes on cuda:LOCAL_RANK, an explicit
cuda:N with several ranks is refused before any work, and the current device the process group sets is
the one resolve() gives the model and DDP. CUDA is stubbed only where rlx asks torch whether it is there
and how many devices it sees."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from rlx.config.preflight import check  # imported before CUDA is stubbed: transformers probes the GPU at import
from rlx.run.config import TrainerConfig
from rlx.run.device import resolve
from rlx.run.distributed import env_local_rank, launched_world_size, process_device
from tests.conftest import compose

SLURM = {"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1", "MASTER_ADDR": "127.0.0.1"}
LAUNCHERS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", *SLURM]


@pytest.fixture
def gpus(monkeypatch):
    """A node with 4 GPUs, as torch would report it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    for k in LAUNCHERS:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def cfg(device: str):
    return OmegaConf.structured(TrainerConfig(device=device, dtype="fp32"))


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_each_rank_computes_on_its_local_gpu(gpus, device):
    assert [resolve(cfg(device), 4, r).device for r in range(4)] == [torch.device(f"cuda:{r}") for r in range(4)]
    assert resolve(cfg(device)).device == torch.device("cuda")  # one process: torch's current device


@pytest.mark.parametrize("device", ["cuda:0", "cuda:1"])
def test_an_explicit_gpu_with_several_ranks_is_refused_by_name(gpus, device):
    with pytest.raises(ValueError, match=rf"trainer\.device={device} with 2 ranks.*trainer\.device=cuda"):
        resolve(cfg(device), 2, 1)
    assert resolve(cfg(device)).device == torch.device(device)  # one process: the GPU it names


def test_more_ranks_than_gpus_is_refused_naming_local_rank(gpus):
    with pytest.raises(ValueError, match=r"LOCAL_RANK 5: this process sees 4 CUDA device"):
        resolve(cfg("cuda"), 8, 5)
    with pytest.raises(ValueError, match=r"trainer\.device=cuda:4: this process sees 4"):
        resolve(cfg("cuda:4"))


@pytest.mark.parametrize("env", [{"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "2"},  # torchrun, one node
                                 {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0"},  # torchrun, node 1 of 2
                                 SLURM])  # SLURM tasks as ranks: LOCAL_RANK comes from SLURM_LOCALID
def test_the_process_groups_device_is_the_one_resolve_gives(gpus, env):
    for k, v in env.items():
        gpus.setenv(k, v)
    want = resolve(cfg("cuda"), launched_world_size(), env_local_rank()).device
    assert process_device(cfg("cuda")) == want == torch.device(f"cuda:{env.get('LOCAL_RANK', env.get('SLURM_LOCALID'))}")
    gpus.setenv("CUDA_VISIBLE_DEVICES", "3")
    gpus.setattr(torch.cuda, "device_count", lambda: 1)
    if want.index > 0:  # the launcher gives this rank one GPU, but its LOCAL_RANK names another: refused, not guessed
        with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES=3"):
            process_device(cfg("cuda"))


def test_preflight_refuses_an_explicit_gpu_under_torchrun_before_any_model(gpus, tmp_path):
    gpus.setenv("WORLD_SIZE", "2")
    gpus.setenv("LOCAL_RANK", "1")
    gpus.setenv("RLX_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"trainer\.device=cuda:0 with 2 ranks"):
        check(compose(["trainer.device=cuda:0", "trainer.dtype=bf16"]))
    assert not (tmp_path / "cache").exists()


def test_preflight_resolves_a_slurm_tasks_gpu_from_its_local_id(gpus, tmp_path):
    # SLURM sets no LOCAL_RANK until init() writes it: preflight must read SLURM_LOCALID, or every task of a
    # node resolves cuda:0 while init() makes cuda:SLURM_LOCALID current
    for k, v in SLURM.items():
        gpus.setenv(k, v)
    gpus.setenv("RLX_CACHE", str(tmp_path / "cache"))
    assert check(compose(["trainer.device=cuda", "trainer.dtype=bf16"])).device == torch.device("cuda:1")
