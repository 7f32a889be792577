"""Elementwise ops (binary with ttnn's broadcasting, unary activations) and the activation descriptors.

Math is fp32 (float64 when every operand is an integer tensor, so uint32/int32 stay exact); the result
is rounded once to the output dtype. Binary outputs take A's dtype and layout (the tensor operand's when A
is a number), and broadcast any size-1 dim of either operand, as ttnn's binary_ng does.
"""

from __future__ import annotations

import enum
from typing import Callable, Sequence, Union

import torch

from .core import _check_on_device, _into
from .errors import TTFatal, check, unsupported
from .tensor import Tensor
from .types import CoreRangeSet, DataType, Layout, MemoryConfig

__all__ = [
    "UnaryOpType",
    "UnaryWithParam",
    "SigmoidMode",
    "add",
    "subtract",
    "sub",
    "multiply",
    "mul",
    "divide",
    "div",
    "eq",
    "gt",
    "ge",
    "where",
    "neg",
    "exp",
    "log",
    "gelu",
    "silu",
    "relu",
    "sigmoid",
    "tanh",
    "rsqrt",
    "sqrt",
    "reciprocal",
    "clamp",
    "plus_one",
]


class UnaryOpType(enum.Enum):
    """The activations the host backend models (a subset of ttnn.UnaryOpType)."""

    EXP = enum.auto()
    GELU = enum.auto()
    GELU_TANH = enum.auto()
    RELU = enum.auto()
    RELU6 = enum.auto()
    SQRT = enum.auto()
    RSQRT = enum.auto()
    SIGMOID = enum.auto()
    SILU = enum.auto()
    TANH = enum.auto()
    RECIP = enum.auto()
    NEG = enum.auto()


class SigmoidMode(enum.Enum):
    Accurate = 0
    AccurateWithFastExp = 1
    FastApproximate = 2


class UnaryWithParam:
    """An activation with its parameters: ``UnaryWithParam(UnaryOpType.SILU)`` or, with one parameter,
    ``UnaryWithParam((UnaryOpType.GELU, 1.0))`` (approximate GELU); ttnn's single-argument overloads."""

    def __init__(self, arg: UnaryOpType | tuple, /) -> None:
        op_type, *params = arg if isinstance(arg, tuple) else (arg,)
        self.op_type = op_type
        self.params = [float(p) for p in params]

    def __repr__(self) -> str:
        return f"UnaryWithParam(op_type={self.op_type.name}, params={self.params})"


_NAMED = {
    "relu": (UnaryOpType.RELU,), "relu6": (UnaryOpType.RELU6,), "silu": (UnaryOpType.SILU,),
    "gelu": (UnaryOpType.GELU, 0.0), "gelu_approx": (UnaryOpType.GELU, 1.0), "gelu_tanh": (UnaryOpType.GELU_TANH,),
    "sigmoid": (UnaryOpType.SIGMOID,), "sigmoid_approx": (UnaryOpType.SIGMOID,), "tanh": (UnaryOpType.TANH,),
    "sqrt": (UnaryOpType.SQRT,), "rsqrt": (UnaryOpType.RSQRT,), "exp": (UnaryOpType.EXP,),
    "recip": (UnaryOpType.RECIP,), "neg": (UnaryOpType.NEG,),
}
_FUNCTIONS: dict[UnaryOpType, Callable[[torch.Tensor], torch.Tensor]] = {
    UnaryOpType.EXP: torch.exp,
    UnaryOpType.GELU: torch.nn.functional.gelu,
    UnaryOpType.GELU_TANH: lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    UnaryOpType.RELU: torch.relu,
    UnaryOpType.RELU6: lambda x: x.clamp(0.0, 6.0),
    UnaryOpType.SQRT: torch.sqrt,
    UnaryOpType.RSQRT: torch.rsqrt,
    UnaryOpType.SIGMOID: torch.sigmoid,
    UnaryOpType.SILU: torch.nn.functional.silu,
    UnaryOpType.TANH: torch.tanh,
    UnaryOpType.RECIP: torch.reciprocal,
    UnaryOpType.NEG: torch.neg,
}

Activation = Union[str, UnaryOpType, UnaryWithParam]


def activation_function(activation: Activation) -> Callable[[torch.Tensor], torch.Tensor]:
    """The torch function of a ttnn activation given as a name ("silu"), a UnaryOpType or a UnaryWithParam."""
    if isinstance(activation, str):
        if activation not in _NAMED:
            raise TTFatal(f"Unknown unary op: {activation}")
        activation = UnaryWithParam(_NAMED[activation])
    elif isinstance(activation, UnaryOpType):
        activation = UnaryWithParam(activation)
    if not isinstance(activation, UnaryWithParam):
        raise TypeError(f"not an activation: {activation!r}")
    if activation.op_type == UnaryOpType.GELU and activation.params and activation.params[0]:
        return _FUNCTIONS[UnaryOpType.GELU_TANH]  # the fast GELU approximates the tanh form
    return _FUNCTIONS[activation.op_type]


def _apply(values: torch.Tensor, activations: Sequence[Activation]) -> torch.Tensor:
    for activation in activations:
        values = activation_function(activation)(values)
    return values


def _compute_dtype(*operands: object) -> torch.dtype:
    tensors = [t for t in operands if isinstance(t, Tensor)]
    return torch.float32 if any(t.is_float for t in tensors) else torch.float64


def _operand(x: Tensor | float | int, dtype: torch.dtype) -> torch.Tensor:
    return x.value.to(dtype) if isinstance(x, Tensor) else torch.tensor(x, dtype=dtype)


def _broadcast(op: str, *operands: object) -> None:
    shapes = [t.value.shape for t in operands if isinstance(t, Tensor)]
    if all(s == shapes[0] for s in shapes):  # the common case; torch.broadcast_shapes is slow Python
        return
    try:
        torch.broadcast_shapes(*shapes)
    except RuntimeError:
        raise TTFatal(f"{op}: shapes {[list(s) for s in shapes]} cannot be broadcast together") from None


def _binary(op: str, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], a: Tensor | float, b: Tensor | float,
            dtype: DataType | None, memory_config: MemoryConfig | None, output_tensor: Tensor | None,
            activations: Sequence[Activation], a_activations: Sequence[Activation],
            b_activations: Sequence[Activation]) -> Tensor:
    tensors = [t for t in (a, b) if isinstance(t, Tensor)]
    if not tensors:
        raise TypeError(f"{op}: at least one operand must be a ttnn.Tensor")
    for t in tensors:
        _check_on_device(t, op)
    if len(tensors) == 2:
        check(a.dtype == b.dtype or (a.is_float and b.is_float), op,
              lambda: f"operand dtypes {a.dtype.name} and {b.dtype.name} must match unless both are float types")
        _broadcast(op, a, b)
    compute = _compute_dtype(a, b)
    x = _apply(_operand(a, compute), a_activations)
    y = _apply(_operand(b, compute), b_activations)
    values = _apply(fn(x, y), activations)
    ref = tensors[0]
    dtype = dtype or (output_tensor.dtype if output_tensor is not None else None)
    out = ref.like(values, dtype=dtype, memory_config=memory_config or ref.memory_config())
    return _into(output_tensor, out)


def add(input_tensor_a: Tensor | float, input_tensor_b: Tensor | float, *, fast_and_approximate_mode: bool = True,
        dtype: DataType | None = None, memory_config: MemoryConfig | None = None,
        output_tensor: Tensor | None = None, activations: Sequence[Activation] = [],
        input_tensor_a_activations: Sequence[Activation] = [], input_tensor_b_activations: Sequence[Activation] = [],
        sub_core_grids: CoreRangeSet | None = None, sub_device_id: object = None) -> Tensor:
    return _binary("add", torch.add, input_tensor_a, input_tensor_b, dtype, memory_config, output_tensor,
                   activations, input_tensor_a_activations, input_tensor_b_activations)


def subtract(input_tensor_a: Tensor | float, input_tensor_b: Tensor | float, *,
             fast_and_approximate_mode: bool = True, dtype: DataType | None = None,
             memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
             activations: Sequence[Activation] = [], input_tensor_a_activations: Sequence[Activation] = [],
             input_tensor_b_activations: Sequence[Activation] = [], sub_core_grids: CoreRangeSet | None = None,
             sub_device_id: object = None) -> Tensor:
    return _binary("subtract", torch.sub, input_tensor_a, input_tensor_b, dtype, memory_config, output_tensor,
                   activations, input_tensor_a_activations, input_tensor_b_activations)


def multiply(input_tensor_a: Tensor | float, input_tensor_b: Tensor | float, *,
             fast_and_approximate_mode: bool = False, dtype: DataType | None = None,
             memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
             activations: Sequence[Activation] = [], input_tensor_a_activations: Sequence[Activation] = [],
             input_tensor_b_activations: Sequence[Activation] = [], sub_core_grids: CoreRangeSet | None = None,
             sub_device_id: object = None) -> Tensor:
    return _binary("multiply", torch.mul, input_tensor_a, input_tensor_b, dtype, memory_config, output_tensor,
                   activations, input_tensor_a_activations, input_tensor_b_activations)


def divide(input_tensor_a: Tensor | float, input_tensor_b: Tensor | float, *,
           fast_and_approximate_mode: bool = False, rounding_mode: str | None = None, dtype: DataType | None = None,
           memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
           activations: Sequence[Activation] = [], input_tensor_a_activations: Sequence[Activation] = [],
           input_tensor_b_activations: Sequence[Activation] = [], sub_core_grids: CoreRangeSet | None = None,
           sub_device_id: object = None) -> Tensor:
    check(rounding_mode in (None, "trunc", "floor"), "divide",
          f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    return _binary("divide", lambda x, y: torch.div(x, y, rounding_mode=rounding_mode), input_tensor_a,
                   input_tensor_b, dtype, memory_config, output_tensor, activations, input_tensor_a_activations,
                   input_tensor_b_activations)


def eq(input_tensor_a: Tensor, input_tensor_b: Tensor | float, *, dtype: DataType | None = None,
       memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
       activations: Sequence[Activation] = [], input_tensor_a_activations: Sequence[Activation] = [],
       input_tensor_b_activations: Sequence[Activation] = [], sub_core_grids: CoreRangeSet | None = None,
       sub_device_id: object = None) -> Tensor:
    """1 where equal, 0 elsewhere, in A's dtype (ttnn has no boolean dtype)."""
    return _binary("eq", lambda x, y: (x == y).to(x.dtype), input_tensor_a, input_tensor_b, dtype, memory_config,
                   output_tensor, activations, input_tensor_a_activations, input_tensor_b_activations)


def gt(input_tensor_a: Tensor, input_tensor_b: Tensor | float, *, dtype: DataType | None = None,
       memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
       activations: Sequence[Activation] = [], input_tensor_a_activations: Sequence[Activation] = [],
       input_tensor_b_activations: Sequence[Activation] = [], sub_core_grids: CoreRangeSet | None = None,
       sub_device_id: object = None) -> Tensor:
    """1 where A > B, 0 elsewhere, in A's dtype."""
    return _binary("gt", lambda x, y: (x > y).to(x.dtype), input_tensor_a, input_tensor_b, dtype, memory_config,
                   output_tensor, activations, input_tensor_a_activations, input_tensor_b_activations)


def ge(input_tensor_a: Tensor, input_tensor_b: Tensor | float, *, dtype: DataType | None = None,
       memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
       activations: Sequence[Activation] = [], input_tensor_a_activations: Sequence[Activation] = [],
       input_tensor_b_activations: Sequence[Activation] = [], sub_core_grids: CoreRangeSet | None = None,
       sub_device_id: object = None) -> Tensor:
    """1 where A >= B, 0 elsewhere, in A's dtype."""
    return _binary("ge", lambda x, y: (x >= y).to(x.dtype), input_tensor_a, input_tensor_b, dtype, memory_config,
                   output_tensor, activations, input_tensor_a_activations, input_tensor_b_activations)


sub = subtract
mul = multiply
div = divide


def where(predicate: Tensor, true_value: Tensor | float, false_value: Tensor | float, *,
          memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
          sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    """``true_value`` where ``predicate`` is non-zero, else ``false_value``; the output takes the dtype of the
    first tensor among (true_value, false_value, predicate)."""
    operands = (predicate, true_value, false_value)
    for t in operands:
        if isinstance(t, Tensor):
            _check_on_device(t, "where")
    _broadcast("where", *operands)
    compute = _compute_dtype(*operands)
    values = torch.where(_operand(predicate, compute) != 0, _operand(true_value, compute),
                         _operand(false_value, compute))
    ref = next(t for t in (true_value, false_value, predicate) if isinstance(t, Tensor))
    out = predicate.like(values, dtype=ref.dtype, memory_config=memory_config or predicate.memory_config())
    return _into(output_tensor, out)


def _unary(op: str, fn: Callable[[torch.Tensor], torch.Tensor], input_tensor: Tensor,
           memory_config: MemoryConfig | None, output_tensor: Tensor | None) -> Tensor:
    _check_on_device(input_tensor, op)
    values = fn(input_tensor.value.to(_compute_dtype(input_tensor)))
    dtype = output_tensor.dtype if output_tensor is not None else None  # written straight in its dtype
    out = input_tensor.like(values, dtype=dtype, memory_config=memory_config or input_tensor.memory_config())
    return _into(output_tensor, out)


def neg(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
        sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("neg", torch.neg, input_tensor, memory_config, output_tensor)


def exp(input_tensor: Tensor, *, fast_and_approximate_mode: bool = False, memory_config: MemoryConfig | None = None,
        output_tensor: Tensor | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("exp", torch.exp, input_tensor, memory_config, output_tensor)


def log(input_tensor: Tensor, *, fast_and_approximate_mode: bool = False, memory_config: MemoryConfig | None = None,
        output_tensor: Tensor | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("log", torch.log, input_tensor, memory_config, output_tensor)


def gelu(input_tensor: Tensor, *, fast_and_approximate_mode: bool = False, memory_config: MemoryConfig | None = None,
         output_tensor: Tensor | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    fn = activation_function(UnaryWithParam((UnaryOpType.GELU, float(fast_and_approximate_mode))))
    return _unary("gelu", fn, input_tensor, memory_config, output_tensor)


def silu(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
         sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("silu", torch.nn.functional.silu, input_tensor, memory_config, output_tensor)


def relu(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
         sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("relu", torch.relu, input_tensor, memory_config, output_tensor)


def sigmoid(input_tensor: Tensor, *, vector_mode: int = 4, mode: SigmoidMode = SigmoidMode.Accurate,
            memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
            sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    if vector_mode != 4:
        raise unsupported("sigmoid", "vector_mode other than 4 (all rows and columns)")
    return _unary("sigmoid", torch.sigmoid, input_tensor, memory_config, output_tensor)


def tanh(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None,
         fast_and_approximate_mode: bool = False, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("tanh", torch.tanh, input_tensor, memory_config, output_tensor)


def rsqrt(input_tensor: Tensor, *, fast_and_approximate_mode: bool = False, memory_config: MemoryConfig | None = None,
          output_tensor: Tensor | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("rsqrt", torch.rsqrt, input_tensor, memory_config, output_tensor)


def sqrt(input_tensor: Tensor, *, fast_and_approximate_mode: bool = False, memory_config: MemoryConfig | None = None,
         output_tensor: Tensor | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("sqrt", torch.sqrt, input_tensor, memory_config, output_tensor)


def reciprocal(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None,
               output_tensor: Tensor | None = None, sub_core_grids: CoreRangeSet | None = None) -> Tensor:
    return _unary("reciprocal", torch.reciprocal, input_tensor, memory_config, output_tensor)


def clamp(input_tensor: Tensor, min: float | None = None, max: float | None = None, *,
          memory_config: MemoryConfig | None = None, output_tensor: Tensor | None = None) -> Tensor:
    """``input_tensor`` limited to ``[min, max]`` (either bound may be None, not both)."""
    check(min is not None or max is not None, "clamp", "at least one of min and max must be given")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        raise unsupported("clamp", "tensor bounds")
    return _unary("clamp", lambda x: x.clamp(min=min, max=max), input_tensor, memory_config, output_tensor)


def plus_one(input_tensor: Tensor, sub_core_grids: CoreRangeSet | None = None,
             skip_negative_entries: bool = False) -> Tensor:
    """``input_tensor`` incremented by one in place (and returned), as ttnn's op writes its input: a decode step
    advances its positions so (a replayed trace again at each replay). ``skip_negative_entries`` leaves negative
    entries (``-1``: an inactive row) and INT32_MAX unchanged; otherwise values wrap at the dtype's range."""
    op = "plus_one"
    _check_on_device(input_tensor, op)
    check(input_tensor.dtype in (DataType.INT32, DataType.UINT32), op,
          f"input must be INT32 or UINT32, got {input_tensor.dtype.name}")
    check(input_tensor.layout == Layout.ROW_MAJOR, op, "input must be in ROW_MAJOR layout")
    check(1 <= len(input_tensor.shape) <= 4, op, f"input must have 1 to 4 dims, got {len(input_tensor.shape)}")
    values = input_tensor.value.to(torch.int64)
    grown = values + 1
    if skip_negative_entries:  # as the kernel reads the values: int32 (a uint32 from 2**31 on is negative)
        grown = torch.where((values >= 0) & (values < 2**31 - 1), grown, values)
    if input_tensor.dtype == DataType.UINT32:
        grown = grown % 2**32
    else:
        grown = (grown + 2**31) % 2**32 - 2**31
    input_tensor.value = grown.to(input_tensor.value.dtype)
    return input_tensor
