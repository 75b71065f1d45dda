"""The Triton kernel compiled ahead of time for Hopper (sm_90) and Blackwell (sm_100), no GPU needed
(issue 57): the configurations a GPU run launches, which the interpreter tests never lower.

- M > 16 launches 64-row tiles; on sm_90 their bf16/fp16 dots lower to wgmma (warp-group MMA), a
  different code path from the 16-row tiles' mma.sync, so both sizes are compiled, in every dtype.
- Decode (M <= 16) on CUDA may split K (fp32 partial sums); that variant is compiled too.
- Row offsets are int64 in the TTIR: row * row stride cannot wrap at 2^31 elements.
"""

import re

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("triton.backends.nvidia")

HOPPER, BLACKWELL = 90, 100


def compile_for(tmp_path, monkeypatch, fmt: str, dtype: str, block_m: int, split_k: bool = False, arch: int = HOPPER):
    """The kernel compiled to a cubin for `arch`, with the constexprs quant_matmul passes for this case."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from rlx.quant import triton_kernels as tk

    kernel = tk._quant_matmul_kernel
    if not hasattr(kernel, "arg_names"):
        pytest.skip("kernel was built in interpreter mode")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    fmt_id, group, high_first, flat_scale = tk._FORMAT_IDS[fmt]
    pointers = {"x_ptr": dtype, "packed_ptr": "u8", "scale_ptr": "fp32" if fmt == "nf4" else "u8",
                "gscale_ptr": "fp32", "lut_ptr": "fp32", "bias_ptr": dtype,
                "out_ptr": "fp32" if split_k else dtype}  # a split writes fp32 partial sums
    signature = {name: f"*{t}" for name, t in pointers.items()}
    constants = dict(FMT=fmt_id, GROUP=group, HIGH_FIRST=high_first, FLAT_SCALE=flat_scale, HAS_BIAS=True,
                     UPCAST_DOT=dtype == "fp32", BF16=dtype == "bf16", SPLIT_K=split_k, BLOCK_M=block_m,
                     BLOCK_N=tk.BLOCK_N, BLOCK_KH=tk.BLOCK_KH)
    signature.update({name: "constexpr" for name in constants})
    signature.update({name: "i32" for name in kernel.arg_names if name not in signature})  # sizes, strides
    signature = {name: signature[name] for name in kernel.arg_names}
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(kernel.arg_names.index(k),): v for k, v in constants.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32))
    assert len(compiled.asm["cubin"]) > 0
    return compiled


def test_launch_sizes_match_what_is_compiled_here():
    from rlx.quant import triton_kernels as tk

    assert [tk.block_m_for(m) for m in (1, 16, 17, 300)] == [16, 16, 64, 64]


@pytest.mark.parametrize(
    "fmt, dtype", [("nvfp4", "bf16"), ("nvfp4", "fp16"), ("nvfp4", "fp32"), ("nf4", "bf16"), ("mxfp4", "bf16")]
)
def test_64_row_tiles_compile_for_hopper(fmt, dtype, tmp_path, monkeypatch):
    compiled = compile_for(tmp_path, monkeypatch, fmt, dtype, block_m=64)
    if dtype != "fp32":  # the half-precision dots take Hopper's warp-group MMA, unlike 16-row tiles
        assert "warp_group_dot" in compiled.asm["ttgir"]


def test_16_row_tiles_take_the_other_mma_path(tmp_path, monkeypatch):
    compiled = compile_for(tmp_path, monkeypatch, "nvfp4", "bf16", block_m=16)
    assert "warp_group_dot" not in compiled.asm["ttgir"]


@pytest.mark.parametrize("fmt", ["nvfp4", "nf4"])
def test_split_k_decode_compiles_for_hopper(fmt, tmp_path, monkeypatch):
    compile_for(tmp_path, monkeypatch, fmt, "bf16", block_m=16, split_k=True)


@pytest.mark.parametrize("block_m", [16, 64])
def test_bf16_compiles_for_blackwell(block_m, tmp_path, monkeypatch):
    compile_for(tmp_path, monkeypatch, "nvfp4", "bf16", block_m=block_m, arch=BLACKWELL)


# an addptr whose offsets are one per row ([R, 1]): row index * row stride
ROW_OFFSET = re.compile(r"tt\.addptr .*: tensor<\d+x1x!tt\.ptr<[^>]+>>, tensor<\d+x1x(i\d+)>")
FLAT_SCALE_OFFSET = re.compile(r"%s_raw\w* = tt\.addptr .*, tensor<\d+x\d+x(i\d+)>")


@pytest.mark.parametrize("fmt", ["nvfp4", "nf4"])
def test_row_offsets_are_64_bit(fmt, tmp_path, monkeypatch):
    """x, the packed weight and the output are addressed through int64 row offsets (nf4's flat scale
    index row * K + column too): with int32 they wrap once M*K, M*N or N*K reaches 2^31."""
    ttir = compile_for(tmp_path, monkeypatch, fmt, "bf16", block_m=64).asm["ttir"]
    widths = ROW_OFFSET.findall(ttir)
    assert len(widths) >= 3, ttir  # x, packed weight, output
    assert set(widths) == {"i64"}, widths
    if fmt == "nf4":
        assert FLAT_SCALE_OFFSET.findall(ttir) == ["i64"]
