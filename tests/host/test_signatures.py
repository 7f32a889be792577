"""Every function the host backend exposes has the real ttnn 0.81.1 signature.

Names, order, defaults and keyword-only markers must equal one overload of the real op, so model code
written against the host backend passes only keywords the real op accepts (and the reverse).
"""

import inspect

import pytest
import ttnn

from tests.real_signatures import _parse_nb, from_python, real_constructor_overloads, real_overloads
from tt_models.runtime import host

# Host classes that only the backend itself constructs (ttnn builds these from C++ or via open_* calls).
INTERNAL_CLASSES = {"Tensor", "MeshDevice"}

NAMESPACES = {"": (host, ttnn), "experimental.": (host.experimental, ttnn.experimental),
              "transformer.": (host.transformer, ttnn.transformer)}


def _exposed(kind):
    for prefix, (host_ns, real_ns) in NAMESPACES.items():
        for name in sorted(getattr(host_ns, "__all__", None) or dir(host_ns)):
            obj = getattr(host_ns, name)
            if name.startswith("_") or inspect.ismodule(obj):
                continue
            if kind == "function" and inspect.isfunction(obj):
                yield pytest.param(obj, real_ns, name, id=prefix + name)
            if (kind == "class" and inspect.isclass(obj) and "__init__" in vars(obj) and name not in INTERNAL_CLASSES
                    and not issubclass(obj, BaseException)):
                yield pytest.param(obj, real_ns, name, id=prefix + name)


def _describe(params):
    return "(" + ", ".join(f"{'*' if p.keyword_only else ''}{p.name}={p.default!r}" for p in params) + ")"


def _assert_matches_one(mine, overloads, what):
    for real in overloads:
        if len(real) == len(mine) and all(a.matches(b) for a, b in zip(mine, real)):
            return
    raise AssertionError(f"{what}: host signature {_describe(mine)} matches none of the real overloads:\n"
                         + "\n".join("  " + _describe(r) for r in overloads))


@pytest.mark.parametrize("fn, real_ns, name", list(_exposed("function")))
def test_function_signature_matches_real_ttnn(fn, real_ns, name):
    assert hasattr(real_ns, name), f"ttnn has no {name}: the host backend must not invent API"
    _assert_matches_one(from_python(fn), real_overloads(getattr(real_ns, name)), name)


@pytest.mark.parametrize("cls, real_ns, name", list(_exposed("class")))
def test_constructor_signature_matches_real_ttnn(cls, real_ns, name):
    assert hasattr(real_ns, name), f"ttnn has no {name}: the host backend must not invent API"
    _assert_matches_one(from_python(cls.__init__)[1:], real_constructor_overloads(getattr(real_ns, name)), name)


def test_extra_keyword_is_caught():
    """The comparison is strict: a host function with one keyword more than ttnn's fails it."""
    def linear(input_tensor_a, input_tensor_b, *, bias=None, not_a_ttnn_keyword=None):
        pass

    with pytest.raises(AssertionError, match="matches none"):
        _assert_matches_one(from_python(linear), real_overloads(ttnn.linear), "linear")


@pytest.mark.parametrize("host_default", [None, 0, "bfloat16"])
def test_unparsable_real_default_matches_nothing(host_default):
    """A real default this parser cannot read fails the comparison, whatever the host's default is."""
    def typecast(input_tensor, *, dtype=host_default):
        pass

    readable = _parse_nb("def __call__(self, input_tensor: ttnn.Tensor, *, dtype: object = None) -> None", None)
    _assert_matches_one(from_python(lambda input_tensor, *, dtype=None: None), [readable], "control")
    unreadable = _parse_nb("def __call__(self, input_tensor: ttnn.Tensor, *, dtype: object = ttnn.bfloat16) -> None",
                           None)
    with pytest.raises(AssertionError, match="matches none"):
        _assert_matches_one(from_python(typecast), [unreadable], "typecast")
