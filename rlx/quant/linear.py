"""QuantLinear: a frozen linear layer that stores only packed codes + scales."""

import contextlib
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlx.quant.formats import dequantize
from rlx.quant.tensor import QuantizedTensor

KERNELS = ("auto", "torch", "triton")

# QuantizedTensor field -> buffer name (nvfp4 names are compressed-tensors' checkpoint names)
_BUFFERS = {"packed": "weight_packed", "scale": "weight_scale", "global_scale": "weight_global_scale",
            "scale_absmax": "weight_scale_absmax", "scale_offset": "weight_scale_offset"}
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
_TRITON_FAILED = False  # set once the fused kernel failed under kernel=auto


def _autocast_input(x: Tensor) -> Tensor:
    """x in the dtype autocast gives a linear's input: the fused kernel is no autocast op (F.linear gets it itself)."""
    kind = x.device.type
    if x.is_floating_point() and torch.is_autocast_enabled(kind):
        return x.to(torch.get_autocast_dtype(kind))
    return x


class QuantLinear(nn.Module):
    """y = x @ dequantize(W)^T + b, with W held as 4-bit codes and block scales (buffers, no grad). kernel: "torch"
    dequantizes then F.linear; "triton" a fused kernel on CUDA (torch on CPU); "auto" triton where importable."""

    def __init__(self, qweight: QuantizedTensor, bias: Tensor | None = None, kernel: str = "auto"):
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"quant.kernel must be one of {KERNELS}, got {kernel!r}")
        self.fmt = qweight.fmt
        self.out_features, self.in_features = qweight.shape
        self.weight_dtype = qweight.dtype  # dtype of the weight before quantization
        self.kernel = kernel
        self._float_dtypes: dict[str, torch.dtype] = {}
        for field_name, tensor in qweight.tensors().items():
            name = _BUFFERS[field_name]
            if tensor.is_floating_point():
                # stored as a same-size integer view so model.to(dtype) / .half() never casts a scale
                self._float_dtypes[name] = tensor.dtype
                tensor = tensor.view(_INT_VIEW[tensor.element_size()])
            self.register_buffer(name, tensor)
        self._held: dict[tuple, Tensor] | None = None  # set by held_dequantized(): (input, autocast dtype) -> W
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @property
    def quantized_weight(self) -> QuantizedTensor:
        """The stored weight as a QuantizedTensor (views of the buffers, no copy)."""
        tensors = {f: self._buffer(b) for f, b in _BUFFERS.items() if b in self._buffers}
        return QuantizedTensor(fmt=self.fmt, shape=torch.Size((self.out_features, self.in_features)),
                               dtype=self.weight_dtype, **tensors)

    @property
    def qweight(self) -> Tensor:
        """The packed uint8 codes [N, K/2] (PEFT reads `qweight` to find a quantized layer's device)."""
        return self.weight_packed

    def _buffer(self, name: str) -> Tensor:
        tensor = self._buffers[name]
        dtype = self._float_dtypes.get(name)
        return tensor if dtype is None else tensor.view(dtype)

    def dequantize(self, dtype: torch.dtype | None = None) -> Tensor:
        return dequantize(self.quantized_weight, dtype or self.weight_dtype)

    def quant_nbytes(self) -> int:
        """Bytes of the packed codes and scales (bias not counted)."""
        return self.quantized_weight.nbytes()

    def _use_triton(self, x: Tensor) -> bool:
        if self.kernel == "torch" or not x.is_cuda:
            return False
        from rlx.quant import triton_kernels

        if not triton_kernels.available():
            if self.kernel == "triton":
                raise RuntimeError("quant.kernel=triton but triton is not importable")
            return False
        return True

    def forward(self, x: Tensor) -> Tensor:  # x [..., K] -> [..., N]
        global _TRITON_FAILED
        if self._use_triton(x) and not (_TRITON_FAILED and self.kernel == "auto"):
            from rlx.quant import triton_kernels

            try:
                return triton_kernels.quant_linear(_autocast_input(x), self.quantized_weight, self.bias)
            except Exception as err:  # compile/launch failure on this GPU: auto falls back, triton raises
                if self.kernel == "triton":
                    raise
                _TRITON_FAILED = True
                warnings.warn(f"QuantLinear: triton kernel failed ({err!r}); using the torch path from now on")
        bias = None if self.bias is None else self.bias.to(x.dtype)
        held = getattr(self, "_held", None)  # a module unpickled from before the attribute existed has none
        if held is not None:  # inside held_dequantized(): one dequantization per dtype, reused
            cast = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else None
            w = held.get((x.dtype, cast))
            if w is None:  # under autocast, held as autocast would cast it at every call: the same values
                w = self.dequantize(x.dtype)
                w = held[(x.dtype, cast)] = w if cast is None else w.to(cast)
            return F.linear(x, w, bias)
        return F.linear(x, self.dequantize(x.dtype), bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, fmt={self.fmt}, "
                f"bias={self.bias is not None}")


@contextlib.contextmanager
def held_dequantized(model: nn.Module):
    """Within the block, each QuantLinear dequantizes its weight once per input dtype and reuses it (the hf engine's
    decode steps, the update's micro-batches): the same outputs, one dequantized copy held until exit."""
    layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    for m in layers:
        m._held = {}
    try:
        yield
    finally:
        for m in layers:
            m._held = None
