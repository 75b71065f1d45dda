"""rlx-export (rlx/eval/export.py): a LoRA checkpoint's adapter in bf16 with its run's config, loaded by rlx-eval.

The exported tensors are torch's own bf16 rounding of the checkpoint's (bit for bit), a policy loaded from the
export holds exactly those values, and on a checkpoint whose adapter already holds bf16 values (so the export
loses nothing: bf16 -> fp32 is exact) `rlx-eval EXPORT` writes the very completions and metrics of `rlx-eval
CHECKPOINT`. Bad input is refused before any model is built, and an interrupted export leaves nothing."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from omegaconf import OmegaConf

from rlx.eval import cli, export, merge
from rlx.eval.export_format import CONFIG, INFO, PEFT_CONFIG, WEIGHTS
from tests.conftest import TINY, compose

STEP = 3
FILES = sorted([CONFIG, INFO, PEFT_CONFIG, WEIGHTS])


def _run(root, overrides, round_bf16: bool):
    """A run directory (.hydra/config.yaml) with ckpt/step_3 holding the tiny model's adapter, every lora_B
    filled in (a fresh adapter's B is zero: it would change nothing); with round_bf16 every adapter value is
    one bf16 can hold exactly."""
    from rlx.models import build_policy
    from rlx.run.checkpoint import Checkpointer
    from rlx.tasks import build_task

    cfg = compose(overrides)
    (root / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, root / ".hydra" / "config.yaml")
    policy, _ = build_policy(cfg, build_task(cfg.task), lambda *_: None, "cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            if "lora_" in name and round_bf16:
                p.copy_(p.to(torch.bfloat16).float())
    return Checkpointer(root / "ckpt").save(STEP, policy, {"step": STEP})


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """fp32 adapter values, most of which bf16 rounds."""
    return _run(tmp_path_factory.mktemp("export_run") / "run", TINY, round_bf16=False)


@pytest.fixture(scope="module")
def rounded(tmp_path_factory):
    """Adapter values bf16 holds exactly: the export loses nothing."""
    return _run(tmp_path_factory.mktemp("export_rounded") / "run", TINY, round_bf16=True)


def _adapter(step_dir):
    from rlx.run.checkpoint import read_adapter

    return read_adapter(step_dir)


def test_export_is_the_checkpoints_adapter_in_bf16_with_its_config(ckpt, tmp_path):
    from safetensors.torch import load_file

    from rlx.eval.source import load_config, resolve
    from rlx.models import base_dir
    from rlx.run.checkpoint import _sha256

    out = tmp_path / "final_adapter"
    out.mkdir()  # an empty OUT_DIR is taken
    info = export.main([str(ckpt), str(out)])
    assert sorted(p.name for p in out.iterdir()) == FILES  # no optimizer or trainer state
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final_adapter"]  # no temp dir left
    on_disk = json.loads((out / INFO).read_text())
    assert on_disk == info and info["format"] == "rlx-export" and info["version"] == 1
    assert info["step"] == STEP and info["dtype"] == "bfloat16" and info["source_dtypes"] == ["float32"]
    assert info["checkpoint"] == str(ckpt) and info["source"] == str(ckpt)
    assert info["files"] == {f: {"size": (out / f).stat().st_size, "sha256": _sha256(out / f)}
                             for f in FILES if f != INFO}
    cfg = load_config(resolve(str(ckpt)), [])
    assert info["base_dir"] == base_dir(cfg).name and info["base_dir"].startswith("tiny-")

    # the tensors: the checkpoint's names, each exactly torch's bf16 rounding of the checkpoint's fp32 tensor
    ck, ex = _adapter(ckpt), load_file(str(out / WEIGHTS))
    assert set(ex) == set(ck) and len(ck) == info["tensors"] > 0
    for name, w in ck.items():
        assert ex[name].dtype == torch.bfloat16 and torch.equal(ex[name], w.to(torch.bfloat16)), name
    assert any(not torch.equal(ex[n].float(), w) for n, w in ck.items())  # the rounding did change values
    # PEFT's config copied as it was; the config is the run's, unresolved (${oc.env:RLX_CACHE,...} still reads the env)
    assert (out / PEFT_CONFIG).read_bytes() == (ckpt / "adapter" / PEFT_CONFIG).read_bytes()
    assert (OmegaConf.to_container(OmegaConf.load(out / CONFIG), resolve=False)
            == OmegaConf.to_container(cfg, resolve=False))
    assert "${oc.env:RLX_CACHE" in (out / CONFIG).read_text()

    # the run directory exports its newest intact checkpoint: the same weights file
    info2 = export.main([str(ckpt.parent.parent), str(tmp_path / "from_run")])
    assert info2["step"] == STEP and info2["files"][WEIGHTS] == info["files"][WEIGHTS]


def test_a_policy_loaded_from_the_export_holds_the_bf16_values(ckpt, tmp_path):
    from peft import get_peft_model_state_dict

    from rlx.eval.source import load_config, load_weights, resolve
    from rlx.models import build_policy
    from rlx.tasks import build_task

    out = tmp_path / "e"
    export.main([str(ckpt), str(out)])
    src = resolve(str(out))
    assert (src.kind, src.step, src.checkpoint, src.run_dir, src.label) == ("export", STEP, out, out, f"step_{STEP}")
    assert cli.out_dir(src, None) == out / "eval" / f"step_{STEP}"  # rlx-eval's default --out
    cfg = load_config(src, [])
    policy, _ = build_policy(cfg, build_task(cfg.task), lambda *_: None, "cpu")
    load_weights(src, policy)
    held = get_peft_model_state_dict(policy)
    ck = _adapter(ckpt)
    assert set(held) == set(ck)
    for name, w in ck.items():  # cast back to the adapter's fp32: exactly the bf16 values
        assert held[name].dtype == torch.float32 and torch.equal(held[name], w.to(torch.bfloat16).float()), name


def test_rlx_eval_on_the_export_writes_the_checkpoints_completions(rounded, tmp_path):
    """The checkpoint's adapter holds bf16 values, so the export is lossless and the loaded policy is bitwise
    the checkpoint's: the same step (evaluation stream), config, engine and weights give the same completions,
    byte for byte, and the same metrics."""
    out = tmp_path / "final_adapter"
    export.main([str(rounded), str(out)])
    a = cli.main([str(rounded), "--out", str(tmp_path / "a")])
    b = cli.main([str(out), "--out", str(tmp_path / "b")])
    base = cli.main([*TINY, "--out", str(tmp_path / "base")])
    assert b["source"] == {"kind": "export", "path": str(out), "checkpoint": str(out), "step": STEP,
                           "label": f"step_{STEP}"}
    assert b["val"] == a["val"] and b["sets"] == a["sets"] and b["config"] == a["config"]
    completions = (tmp_path / "b" / "completions.jsonl").read_text()
    assert completions == (tmp_path / "a" / "completions.jsonl").read_text()

    def greedy(d):
        rows = [json.loads(line) for line in (tmp_path / d / "completions.jsonl").read_text().splitlines()]
        return [r["completion"] for r in rows if r["kind"] == "greedy"]

    assert len(greedy("b")) == 16 and greedy("b") != greedy("base")  # the adapter is in there: not the base's


def test_an_interrupted_export_leaves_nothing(ckpt, tmp_path, monkeypatch):
    import safetensors.torch

    def die(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", die)
    with pytest.raises(KeyboardInterrupt):
        export.main([str(ckpt), str(tmp_path / "out")])
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_refused_before_any_model_is_built(ckpt, tmp_path, monkeypatch):
    import rlx.models

    from rlx.models import build_policy
    from rlx.run.checkpoint import Checkpointer
    from rlx.tasks import build_task

    # a full fine-tuning checkpoint (built before build_policy is disabled)
    full_cfg = compose([*TINY, "model.finetune=full"])
    full_policy, _ = build_policy(full_cfg, build_task(full_cfg.task), lambda *_: None, "cpu")
    full = Checkpointer(tmp_path / "full" / "ckpt").save(2, full_policy, {"step": 2})
    good = tmp_path / "good"
    export.main([str(ckpt), str(good)])

    def boom(*a, **k):
        raise AssertionError("a model was built")

    monkeypatch.setattr(rlx.models, "build_policy", boom)
    monkeypatch.setattr(cli, "build", boom)
    monkeypatch.setattr(merge, "merged_model", boom)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    with pytest.raises(SystemExit, match=rf"rlx-export: error: OUT_DIR {taken} already exists and is not empty"):
        export.main([str(ckpt), str(taken)])
    with pytest.raises(SystemExit, match="is a full fine-tuning checkpoint .*model/model.safetensors"):
        export.main([str(full), str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="already an exported adapter"):
        export.main([str(good), str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="does not exist"):
        export.main([str(tmp_path / "nope"), str(tmp_path / "o")])
    bad = tmp_path / "bad" / "ckpt" / f"step_{STEP}"
    shutil.copytree(ckpt, bad)
    with open(bad / "adapter" / "adapter_model.safetensors", "r+b") as f:
        f.truncate(10)
    with pytest.raises(SystemExit, match="adapter/adapter_model.safetensors is corrupt"):
        export.main([str(bad), str(tmp_path / "o")])
    assert not (tmp_path / "o").exists() and (taken / "x").is_file()

    # an export whose files no longer match export.json: refused by rlx-eval (and rlx-merge), the file named
    with pytest.raises(SystemExit, match="selects a config group"):
        cli.main([str(good), "model=smollm2"])
    for rel in (WEIGHTS, CONFIG):
        t = tmp_path / f"tampered_{rel}"
        shutil.copytree(good, t)
        data = bytearray((t / rel).read_bytes())
        data[-1] ^= 1  # one bit, same size
        (t / rel).write_bytes(bytes(data))
        with pytest.raises(SystemExit, match=rf"rlx-eval: error: exported adapter {t}: {rel} is corrupt: sha256"):
            cli.main([str(t)])
    with pytest.raises(SystemExit, match=rf"merge: error: .*{WEIGHTS} is corrupt: sha256"):
        merge.main([str(tmp_path / f"tampered_{WEIGHTS}"), "--out", str(tmp_path / "m")])
    gone = tmp_path / "gone"
    shutil.copytree(good, gone)
    (gone / WEIGHTS).unlink()
    with pytest.raises(SystemExit, match=rf"{WEIGHTS} is missing \(listed in export.json\)"):
        cli.main([str(gone)])
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def test_rlx_merge_takes_the_export_as_the_checkpoint(rounded, tmp_path):
    """The lossless export merges into the same HF model as its checkpoint: the same weights file."""
    out = tmp_path / "final_adapter"
    export.main([str(rounded), str(out)])
    merge.main([str(rounded), "--out", str(tmp_path / "m_ckpt")])
    merge.main([str(out), "--out", str(tmp_path / "m_export")])
    assert ((tmp_path / "m_export" / "model.safetensors").read_bytes()
            == (tmp_path / "m_ckpt" / "model.safetensors").read_bytes())
    assert json.loads((tmp_path / "m_export" / "rlx_merge.json").read_text())["checkpoint"] == str(out)
