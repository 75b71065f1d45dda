"""The shared-prefix forward in whole runs: LoRA on an NVFP4 base trains what the unshared forward trains
(rewards and samples equal, losses within 1e-5 relative). On two ranks: tests/run/test_distributed.py's
two-node test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_tiny
from tests.run.test_train import EASY
from tests.run.test_distributed import assert_same_run

pytestmark = pytest.mark.integration


# on-policy, the policy-gradient loss is 0 up to float noise (advantages sum to 0 in each group): its
# value is noise of ~1e-8 in both runs, so the gradient norm is what is compared
NOISE = ("actor/loss", "actor/pg_loss")


def _metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in NOISE} for r in rows]


@pytest.mark.parametrize("extra", [["quant=nvfp4"], ["algo=cispo", "quant=nvfp4", "noise=aqn"]],
                         ids=["nvfp4", "cispo-nvfp4-aqn"])
def test_shared_prefix_on_a_quantized_base_trains_the_same_run(tmp_path, extra):
    # an easy task and a partial-credit reward, so that groups have reward variance (a gradient) in 4 steps
    extra = extra + EASY + ["task.rewards={correct: 1.0, format: 0.25}"]
    run_tiny(tmp_path / "plain", extra + ["algo.shared_prefix=false"])
    run_tiny(tmp_path / "shared", extra + ["algo.shared_prefix=true"])
    plain, shared = _metrics(tmp_path / "plain"), _metrics(tmp_path / "shared")
    assert any(r.get("actor/grad_norm", 0) > 0 for r in plain)  # the runs really trained
    assert_same_run(plain, shared, range(len(plain)))
