"""An adapter saved by a run loads from any directory: it records its base model by absolute path."""

import json
import os

import pytest

pytestmark = pytest.mark.integration


def test_adapter_records_an_absolute_base_and_loads_from_elsewhere(tmp_path, monkeypatch):
    from tests.conftest import run_tiny

    launch = tmp_path / "launch"
    launch.mkdir()
    monkeypatch.chdir(launch)
    run_tiny(launch / "run", ["model.cache_dir=rel_cache", "train.steps=2"])  # a relative cache directory
    adapter = launch / "run" / "ckpt" / "step_2" / "adapter"
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert os.path.isabs(base) and (launch / "rel_cache") in [p for p in __import__("pathlib").Path(base).parents]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    from peft import AutoPeftModelForCausalLM

    model = AutoPeftModelForCausalLM.from_pretrained(str(adapter))
    assert sum(p.numel() for n, p in model.named_parameters() if "lora_" in n) > 0
