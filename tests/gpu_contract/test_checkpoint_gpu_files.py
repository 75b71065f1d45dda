"""A GPU run's checkpoint reads anywhere (issue 57): `trainer_state.pt` holds the optimizer's CUDA tensors,
which torch.load puts back on the device they were saved from unless told otherwise: on a CPU machine that
raises (rlx-eval called the checkpoint corrupt), and under torchrun every rank first loaded rank 0's state
onto cuda:0. rlx reads it onto the CPU; the optimizer moves its state to the parameters' device.

No GPU here, so the GPU run's file is made as torch writes it: a state saved from CPU tensors whose
storages' location tags are then rewritten to 'cuda:0' (the tag torch.save records for a tensor on the
first GPU), which is all torch.load reads to choose the device."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rlx.run import device as D
from rlx.run.checkpoint import STATE, Checkpointer, CorruptCheckpointError, read_state, write_manifest
from tests.tiny import MINIMAL, tiny_qwen2

CPU_TAG, CUDA_TAG = b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0"  # BINUNICODE strings (pickle protocol 2)


def as_saved_on_gpu(path) -> None:
    """Rewrite every storage location tag of the torch.save zip at `path` from 'cpu' to 'cuda:0'."""
    with zipfile.ZipFile(path) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for info, data in entries:
            if info.filename.endswith("/data.pkl"):
                assert CPU_TAG in data, "torch.save wrote no 'cpu' location tag: the pickle format changed"
                data = data.replace(CPU_TAG, CUDA_TAG)  # pickle protocol 2 has no frames: lengths need no fixing
            z.writestr(info, data)
    path.write_bytes(out.getvalue())


@pytest.fixture
def policy():
    from peft import LoraConfig, get_peft_model

    return get_peft_model(tiny_qwen2(**MINIMAL), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                            init_lora_weights=False))


def gpu_state(policy, config: dict | None = None) -> dict:
    """A trainer state shaped like a GPU run's: AdamW moments, every RNG (CUDA's as torch returns it: a CPU
    ByteTensor per device), the rollout stream."""
    opt = torch.optim.AdamW([q for q in policy.parameters() if q.requires_grad], lr=1e-3)
    for q in opt.param_groups[0]["params"]:
        q.grad = torch.ones_like(q)
    opt.step()
    rng = {**D.rng_state(), "cuda": [torch.get_rng_state().clone(), torch.get_rng_state().clone()]}
    return {"step": 3, "optimizer": opt.state_dict(), "rng": rng, "rollout_rng": torch.Generator().manual_seed(5).get_state(),
            "task": {"pos": np.arange(3)}, "config": config}


def gpu_checkpoint(tmp_path, policy, config=None):
    state = gpu_state(policy, config)
    path = Checkpointer(tmp_path / "ckpt").save(3, policy, state)
    as_saved_on_gpu(path / STATE)
    write_manifest(path, 3)  # the manifest a GPU run writes covers the file as it wrote it
    return path, state


def test_the_crafted_file_is_one_torch_load_puts_on_cuda(tmp_path, policy):
    path, _ = gpu_checkpoint(tmp_path, policy)
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine the file loads onto cuda:0: the CPU-machine failure cannot be shown")
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        torch.load(path / STATE, weights_only=True)


def test_a_gpu_runs_trainer_state_reads_onto_the_cpu(tmp_path, policy):
    path, saved = gpu_checkpoint(tmp_path, policy)
    got = read_state(path)
    moments = [t for s in got["optimizer"]["state"].values() for t in s.values()]
    assert moments and all(t.device.type == "cpu" for t in moments)
    for k, s in saved["optimizer"]["state"].items():
        for name, t in s.items():
            assert torch.equal(got["optimizer"]["state"][k][name], t)
    # CUDA's RNG state stays what torch.cuda.set_rng_state_all takes: a CPU ByteTensor per device
    assert all(t.device.type == "cpu" and t.dtype == torch.uint8 for t in got["rng"]["cuda"])
    assert torch.equal(got["rollout_rng"], saved["rollout_rng"]) and (got["task"]["pos"] == np.arange(3)).all()


def test_rlx_eval_of_a_gpu_runs_checkpoint_loads_its_config_and_weights(tmp_path, policy):
    from rlx.eval.source import load_config, load_weights, resolve
    from tests.conftest import compose

    config = OmegaConf.to_container(compose(["train.steps=3"]), resolve=True)
    path, _ = gpu_checkpoint(tmp_path, policy, config)
    src = resolve(str(path))  # no .hydra/config.yaml beside it: the config comes from trainer_state.pt
    assert src.kind == "checkpoint" and src.config_file is None and src.step == 3
    assert load_config(src, ["rollout.eval_k=0"]).train.steps == 3
    trained = {n: q.detach().clone() for n, q in policy.named_parameters() if q.requires_grad}
    with torch.no_grad():
        for n, q in policy.named_parameters():
            if q.requires_grad:
                q.zero_()
    load_weights(src, policy)
    assert all(torch.equal(q, trained[n]) for n, q in policy.named_parameters() if q.requires_grad)


def test_the_optimizer_moves_cpu_state_to_its_parameters_device(tmp_path, policy):
    """What resume relies on: Optimizer.load_state_dict casts each moment to its parameter's device and dtype
    ('meta' stands in for cuda: a device other than the state's), and keeps AdamW's step count where it was."""
    path, _ = gpu_checkpoint(tmp_path, policy)
    state = read_state(path)["optimizer"]
    params = [torch.nn.Parameter(torch.empty_like(q, device="meta", dtype=torch.bfloat16))
              for q in policy.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    opt.load_state_dict(state)
    for q in params:
        s = opt.state[q]
        assert s["exp_avg"].device.type == "meta" and s["exp_avg_sq"].dtype == torch.bfloat16
        assert s["step"].device.type == "cpu"  # (non-fused, non-capturable AdamW keeps the count on the CPU)


def test_a_really_corrupt_state_is_still_named(tmp_path, policy):
    path, _ = gpu_checkpoint(tmp_path, policy)
    (path / STATE).write_bytes((path / STATE).read_bytes()[:200])
    with pytest.raises(CorruptCheckpointError, match="trainer_state.pt is corrupt"):
        read_state(path)
