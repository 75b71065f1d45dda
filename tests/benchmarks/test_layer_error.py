"""Per-layer quantization error (benchmarks.layer_error, python -m benchmarks.quant_error): hand-computed values on one
row, the layers and numerics of the quantized base itself, compressed-tensors' and bitsandbytes' dequantized
values, the summary, and the command's refusals and files."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from rlx.quant import QuantConfig, dequantize, quant_linears, quantize, quantize_model
from benchmarks.layer_error import markdown, model_errors, output_error, summarize, weight_error
from tests.quant.quant_helpers import LINEAR_NAMES, tiny_qwen

# One row whose block amax is 6, so every format's scale is exactly 1 and the codes are E2M1 of the values:
#   nvfp4: gs = fp32(fp32(1/6) * 2688) = 448.0 (448.0000133 rounds to 448 in fp32), s = fp8(448 * 6/6) = 448,
#          s / gs = 1;  mxfp4: scale 2^(floor(log2 6) - 2) = 2^0 = 1.
# E2M1 with ties to even: 6->6, 3->3, 1.25->1, 0.25->0, 5->4, 2.5->2, -1.75->-2, 0.75->1.
ROW = [6.0, 3.0, 1.25, 0.25, 5.0, 2.5, -1.75, 0.75]
DEQ = [6.0, 3.0, 1.0, 0.0, 4.0, 2.0, -2.0, 1.0]
# W - Q = [0, 0, .25, .25, 1, .5, .25, -.25]: ||W - Q||^2 = 4 * .0625 + 1 + .25 = 1.5
# ||W||^2 = 36 + 9 + 1.5625 + .0625 + 25 + 6.25 + 3.0625 + .5625 = 81.5
E2M1_REL = math.sqrt(1.5 / 81.5)  # 0.13566...


def _row(width: int) -> torch.Tensor:
    return torch.tensor([ROW + [0.0] * (width - len(ROW))])  # [1, width]


@pytest.mark.parametrize("fmt,width", [("nvfp4", 16), ("mxfp4", 32)])
def test_hand_computed_e2m1_row(fmt, width):
    w = _row(width)
    deq = dequantize(quantize(w, fmt), torch.float32)
    assert deq[0, :8].tolist() == DEQ and not deq[0, 8:].any()
    err = weight_error(w, deq)
    assert err["rel_fro"] == pytest.approx(E2M1_REL, rel=1e-6)
    assert err["max_abs"] == 1.0  # 5 -> 4


def test_hand_computed_nf4_row():
    # absmax 2 over the 64-block: normalized [1, -1, 0.5, 0, ...]; 0.5 lies between the NF4 values
    # 0.44070983 (0.0593 away) and 0.56261700 (0.0626 away) -> 0.44070983 * 2 = 0.88141966; 1, -1, 0 exact.
    w = torch.tensor([[2.0, -2.0, 1.0] + [0.0] * 61])
    deq = dequantize(quantize(w, "nf4"), torch.float32)
    assert deq[0, :4].tolist() == pytest.approx([2.0, -2.0, 0.8814196586608887, 0.0], abs=1e-7)
    err = weight_error(w, deq)
    # ||W - Q|| = 1 - 0.88141966 = 0.11858034; ||W|| = sqrt(4 + 4 + 1) = 3
    assert err["rel_fro"] == pytest.approx(0.11858034 / 3, rel=1e-5)
    assert err["max_abs"] == pytest.approx(0.11858034, rel=1e-5)


def test_hand_computed_output_error():
    w = _row(16)
    deq = torch.tensor([DEQ + [0.0] * 8])
    # x = ones: x W^T = sum(ROW) = 17.0, x Q^T = sum(DEQ) = 15.0 -> |17 - 15| / 17
    assert output_error(torch.ones(1, 16), w, deq) == pytest.approx(2 / 17)
    # x = e_4 reads the fifth column only: |5 - 4| / 5
    assert output_error(torch.eye(16)[4:5], w, deq) == pytest.approx(1 / 5)


def _configs(**kw) -> dict[str, QuantConfig]:
    return {f: QuantConfig(format=f, double_quant=(f == "nf4"), **kw) for f in ("nvfp4", "nf4", "mxfp4")}


def test_rows_are_exactly_the_layers_the_quantized_base_holds():
    model = tiny_qwen(dtype=torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    configs = _configs()
    rows = model_errors(model, configs)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing changed
    assert len(rows) == 3 * 2 * len(LINEAR_NAMES)
    for fmt, cfg in configs.items():
        packed = quantize_model(copy.deepcopy(model), cfg)  # what a run with quant=<fmt> trains on
        mine = {r["layer"]: r for r in rows if r["format"] == fmt}
        held = {name.removeprefix("model.layers."): m for name, m in quant_linears(packed).items()}
        assert set(mine) == set(held)
        for key, module in held.items():
            block, name = key.split(".", 1)
            weight = model.model.layers[int(block)].get_submodule(name).weight
            expected = weight_error(weight, dequantize(module.quantized_weight, torch.float32))
            assert (mine[key]["rel_fro"], mine[key]["max_abs"]) == (expected["rel_fro"], expected["max_abs"])
            assert mine[key]["type"] == name.rsplit(".", 1)[-1] and mine[key]["out_rel"] is None


@pytest.mark.integration
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nvfp4_values_are_compressed_tensors_dequantized_values(dtype):
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize as ct_dequantize

    from tests.quant.quant_helpers import ct_global_scale, ct_nvfp4

    model = tiny_qwen(dtype=dtype)
    rows = {r["layer"]: r for r in model_errors(model, {"nvfp4": QuantConfig(format="nvfp4")})}
    for index, layer in enumerate(model.model.layers):
        linears = {n: m for n, m in layer.named_modules() if n.rsplit(".", 1)[-1] in LINEAR_NAMES}
        for group in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("o_proj",), ("down_proj",)):
            members = {n: m for n, m in linears.items() if n.rsplit(".", 1)[-1] in group}
            # llm-compressor's fused layers: the smallest of the members' global scales
            gs = torch.min(torch.cat([ct_global_scale(m.weight.detach()) for m in members.values()])).reshape(1)
            for name, module in members.items():
                state = ct_nvfp4(module.weight.detach(), global_scale=gs)
                m, n = state["weight_packed"].shape
                codes = unpack_fp4_from_uint8(state["weight_packed"], m, 2 * n, dtype=torch.float32)
                scale = NVFP4PackedCompressor._decompress_scale(state["weight_scale"], torch.float32)
                ref = ct_dequantize(x_q=codes, scale=scale, global_scale=state["weight_global_scale"],
                                    dtype=torch.float32)  # compressed-tensors' dequantization, in fp32
                expected = weight_error(module.weight, ref)
                got = rows[f"{index}.{name}"]
                assert (got["rel_fro"], got["max_abs"]) == (expected["rel_fro"], expected["max_abs"]), name


@pytest.mark.parametrize("double_quant", [False, True])
def test_nf4_values_are_bitsandbytes_dequantized_values(double_quant):
    bnb_f = pytest.importorskip("bitsandbytes.functional")
    model = tiny_qwen(dtype=torch.float32)  # in_features 64 and 128: row-aligned 64-blocks
    rows = {r["layer"]: r for r in model_errors(model, {"nf4": QuantConfig(format="nf4", double_quant=double_quant)})}
    for index, layer in enumerate(model.model.layers):
        for name, module in layer.named_modules():
            if name.rsplit(".", 1)[-1] not in LINEAR_NAMES:
                continue
            w = module.weight.detach()
            packed, state = bnb_f.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=double_quant)
            expected = weight_error(w, bnb_f.dequantize_4bit(packed, state))
            got = rows[f"{index}.{name}"]
            if double_quant:  # bitsandbytes' CPU kernel picks the farther 8-bit scale code for ~0.1% of blocks
                assert got["rel_fro"] == pytest.approx(expected["rel_fro"], rel=2e-3), name
            else:
                assert got["rel_fro"] == pytest.approx(expected["rel_fro"], rel=1e-6), name
                assert got["max_abs"] == pytest.approx(expected["max_abs"], rel=1e-6), name


def test_summary_pools_per_format_and_layer_type():
    rows = [{"format": "nvfp4", "layer": f"{b}.self_attn.{t}", "block": b, "type": t, "shape": [4, 16],
             "rel_fro": v, "max_abs": m, "out_rel": o}
            for b, t, v, m, o in [(0, "q_proj", 0.10, 0.5, 0.2), (0, "k_proj", 0.20, 1.5, None),
                                  (1, "q_proj", 0.30, 0.25, 0.4), (1, "k_proj", 0.08, 0.75, None)]]
    s = summarize(rows)["nvfp4"]
    assert s["layers"] == 4
    assert s["rel_fro"]["mean"] == pytest.approx(0.17)  # (0.1 + 0.2 + 0.3 + 0.08) / 4
    assert s["rel_fro"]["median"] == pytest.approx(0.15)  # (0.1 + 0.2) / 2
    assert s["worst"] == {"layer": "1.self_attn.q_proj", "rel_fro": 0.30, "out_rel": 0.4}
    assert s["max_abs"]["max"] == 1.5
    assert s["out_rel"]["mean"] == pytest.approx(0.3)  # only the rows that have one
    assert s["by_type"]["q_proj"]["rel_fro"]["mean"] == pytest.approx(0.2)
    assert s["by_type"]["k_proj"]["rel_fro"]["max"] == 0.2 and s["by_type"]["k_proj"]["out_rel"] is None
    md = markdown({"nvfp4": s})
    assert "| nvfp4 | 4 | 17.00 / 15.00 / 30.00 (1.self_attn.q_proj) | 1.5 | 30.00 / 30.00 / 40.00 |" in md
    assert "| nvfp4 | 20.00 / 30.00 (30.00) | 14.00 / 20.00 |" in md


# ---- the command --------------------------------------------------------------------------------------

def _forbid_model(monkeypatch):
    import rlx.models

    def refuse(*a, **k):
        raise AssertionError("a model was built")

    monkeypatch.setattr(rlx.models, "load_base", refuse)


@pytest.mark.parametrize("args,message", [
    (["--formats", "nvfp4,int3"], "unknown quant format(s) ['int3']"),
    (["--formats", "none"], "unknown quant format(s) ['none']"),
    (["--formats", ","], "--formats is empty"),
    (["quant=nf4"], "the formats come from --formats"),
    (["quant.targets=[]"], "quant.targets is empty"),
    (["algo.lrr=1"], "algo.lrr"),
])
def test_bad_input_is_refused_before_any_model_is_built(monkeypatch, tmp_path, args, message):
    from benchmarks.quant_error import main

    _forbid_model(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        main([*args, "--out", str(tmp_path)])
    assert message in str(exc.value)
    assert not list(tmp_path.iterdir())


def _tiny_args():
    from tests.conftest import TINY

    return [o for o in TINY if o.startswith(("model.", "trainer."))]


def test_targets_that_match_no_linear_layer_are_named(tmp_path):
    from benchmarks.quant_error import main

    with pytest.raises(SystemExit) as exc:
        main([*_tiny_args(), "quant.targets=[no_such_proj]", "--prompts", "0", "--out", str(tmp_path)])
    assert "matched no nn.Linear" in str(exc.value) and "no_such_proj" in str(exc.value)
    assert not list(tmp_path.iterdir())


def test_command_on_the_tiny_model_writes_every_layer_per_format(tmp_path, capsys):
    from benchmarks.quant_error import main

    doc = main([*_tiny_args(), "--prompts", "3", "--rows", "16", "--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quant_error.json", "quant_error.md"]  # no temp file
    saved = json.loads((tmp_path / "quant_error.json").read_text())
    assert saved["summary"] == json.loads(json.dumps(doc["summary"]))
    layers = saved["layers"]
    assert len(layers) == 3 * 2 * len(LINEAR_NAMES)  # TINY: 2 blocks x 7 linears x 3 formats
    assert {r["format"] for r in layers} == {"nvfp4", "nf4", "mxfp4"}
    assert all(0 < r["rel_fro"] < 0.5 and r["out_rel"] is not None and 0 < r["out_rel"] < 1 for r in layers)
    assert saved["formats"]["nf4"]["double_quant"] is True  # conf/quant/nf4.yaml: QLoRA
    assert saved["inputs"]["prompts"] == 3
    printed = capsys.readouterr().out
    assert "| nvfp4 | 14 |" in printed and (tmp_path / "quant_error.md").read_text() in printed
