"""python -m rlx.eval.merge: a checkpoint's LoRA adapter merged into the base and saved as a plain HF model
directory gives the LoRA policy's logits (fp32), and bad input is refused before any model is built."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from rlx.eval import merge
from tests.conftest import TINY, compose

STEP = 3


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A run directory (.hydra/config.yaml) with ckpt/step_3: the tiny default model's LoRA adapter with every
    lora_B filled in (a fresh adapter's B is zero: the merge would change nothing), written by Checkpointer."""
    from rlx.models import build_policy
    from rlx.run.checkpoint import Checkpointer
    from rlx.tasks import build_task

    run = tmp_path_factory.mktemp("merge_run")
    cfg = compose(TINY)
    (run / ".hydra").mkdir()
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    task = build_task(cfg.task)
    policy, _ = build_policy(cfg, task, lambda *_: None, "cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return Checkpointer(run / "ckpt").save(STEP, policy, {"step": STEP})


def _lora_policy(path):
    """The policy as rlx-eval builds it for `path` (cli.build without the engine)."""
    from rlx.eval.source import load_config, resolve
    from rlx.models import build_policy
    from rlx.run.checkpoint import Checkpointer
    from rlx.tasks import build_task

    src = resolve(str(path))
    cfg = load_config(src, [])
    task = build_task(cfg.task)
    policy, tok = build_policy(cfg, task, lambda *_: None, "cpu")
    Checkpointer.load(src.checkpoint, policy)
    return policy.eval(), tok, task


def test_merged_model_gives_the_lora_policys_logits(ckpt, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlx.models import causal_lm
    from rlx.rollout.hf import encode_prompts

    out = tmp_path / "merged"
    merge.main([str(ckpt), "--out", str(out)])
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not any(p.name.startswith((".tmp-", "adapter")) for p in tmp_path.iterdir() if p != out)
    info = json.loads((out / "rlx_merge.json").read_text())
    assert info["step"] == STEP and info["lora_merged"] is True and info["checkpoint"] == str(ckpt)

    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    policy, rlx_tok, task = _lora_policy(ckpt)
    prompts = [e.prompt for e in task.eval[:8]]
    ids, mask = encode_prompts(rlx_tok, prompts)
    assert torch.equal(ids, encode_prompts(tok, prompts)[0])  # the saved tokenizer encodes as the policy's
    with torch.no_grad():
        lora_logits = causal_lm(policy)(input_ids=ids, attention_mask=mask).logits
        with policy.disable_adapter():
            base_logits = causal_lm(policy)(input_ids=ids, attention_mask=mask).logits
        merged_logits = merged(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()
    assert (lora_logits - base_logits)[keep].abs().max() > 1e-2  # the adapter changes the model ...
    torch.testing.assert_close(merged_logits[keep], lora_logits[keep], rtol=1e-4, atol=1e-4)  # ... and the merge keeps it


def test_merge_replaces_only_with_force(ckpt, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "old.txt").write_text("x")
    with pytest.raises(SystemExit, match="already exists"):
        merge.main([str(ckpt), "--out", str(out)])
    merge.main([str(ckpt), "--out", str(out), "--force"])
    assert not (out / "old.txt").exists() and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temp or old directory left


def test_bad_input_is_refused_before_any_model_is_built(ckpt, tmp_path, monkeypatch):
    import rlx.models

    def boom(*a, **k):
        raise AssertionError("a model was built")

    monkeypatch.setattr(rlx.models, "build_policy", boom)
    monkeypatch.setattr(merge, "merged_model", boom)
    out = str(tmp_path / "out")
    cases = [
        ([], "no checkpoint given"),
        ([str(tmp_path / "nope")], "does not exist"),
        ([str(tmp_path)], "not an rlx run directory"),
        ([str(ckpt), "quant.format=nf4"], "quant.format=nf4"),
        ([str(ckpt), "model=smollm2"], "config group"),
        ([str(ckpt), "algo.no_such_key=1"], "no_such_key"),
    ]
    for args, msg in cases:
        with pytest.raises(SystemExit, match=msg):
            merge.main([*args, "--out", out])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ckpt").mkdir()
    import shutil

    shutil.copytree(ckpt, tmp_path / "bad" / "ckpt" / f"step_{STEP}")
    (tmp_path / "bad" / "ckpt" / f"step_{STEP}" / "adapter" / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(SystemExit, match="adapter_model.safetensors is corrupt"):
        merge.main([str(tmp_path / "bad" / "ckpt" / f"step_{STEP}"), "--out", out])
    assert not (tmp_path / "out").exists()
