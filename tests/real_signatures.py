"""The signatures of the real ttnn 0.81.1 functions, as comparable parameter lists.

Most ttnn ops are nanobind objects whose ``__call__`` carries ``__nb_signature__``: one
``(text, doc, defaults)`` triple per overload, where the text writes each default as ``\\N`` (an index
into ``defaults``). Python-level ops (``from_torch``, ``to_torch``) expose an ordinary signature.
"""

from __future__ import annotations

import ast
import enum
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

UNKNOWN = object()  # a default the real binding does not publish (e.g. ``ttnn.open_device``)
NO_DEFAULT = inspect.Parameter.empty


@dataclass(frozen=True)
class Unparsed:
    """A default the real signature writes as text this module cannot read: it matches nothing, so the
    comparison fails (naming the text) instead of passing whatever the host default is."""

    text: str


@dataclass(frozen=True)
class Param:
    name: str
    keyword_only: bool
    default: Any  # NO_DEFAULT, UNKNOWN, or a normalized value
    positional_only: bool = False

    def matches(self, other: "Param") -> bool:
        if self.keyword_only != other.keyword_only:
            return False
        if self.name != other.name and not (self.positional_only or other.positional_only):
            return False
        if isinstance(self.default, Unparsed) or isinstance(other.default, Unparsed):
            return False
        if UNKNOWN in (self.default, other.default):
            both_or_neither = (self.default is NO_DEFAULT) == (other.default is NO_DEFAULT)
            return both_or_neither or UNKNOWN in (self.default, other.default)
        return self.default == other.default


def normalize(value: Any) -> Any:
    """Defaults compare across backends by value; enum members by their name."""
    if value is NO_DEFAULT or value is UNKNOWN:
        return value
    if isinstance(value, enum.Enum) or _is_nb_enum(value):
        return ("enum", value.name)
    if isinstance(value, (list, tuple, set, frozenset)):
        return ("seq", tuple(normalize(v) for v in value))
    if hasattr(value, "num_cores") and callable(value.num_cores):
        return ("cores", value.num_cores())  # e.g. an empty CoreRangeSet
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return ("object", type(value).__name__)  # a default-constructed config object


def _is_nb_enum(value: Any) -> bool:
    # nanobind enums are enum.Enum subclasses in recent nanobind; older ones only have ``.name``/``.value``.
    return hasattr(value, "name") and hasattr(value, "value") and not isinstance(value, type)


def _split_top_level(text: str) -> list[str]:
    parts, depth, start, quote = [], 0, 0, None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _parse_nb(text: str, defaults: tuple | None) -> list[Param]:
    inner = text[text.index("(") + 1: text.rindex(")")]
    parts = _split_top_level(inner)
    n_positional_only = parts.index("/") if "/" in parts else 0
    publishes_defaults = defaults is not None or any("=" in p for p in parts)
    params, keyword_only = [], False
    for i, part in enumerate(parts):
        part = part.replace("\\*", "*")
        if part == "self":
            continue
        if part == "*":
            keyword_only = True
            continue
        if part == "/":
            continue
        name = re.match(r"\**(\w+)", part).group(1)
        m = re.search(r"=\s*\\(\d+)\s*$", part)
        literal = re.search(r"=\s*([^=]+)$", part)
        if m:
            default = normalize(defaults[int(m.group(1))]) if defaults is not None else UNKNOWN
        elif literal:
            try:
                default = normalize(ast.literal_eval(literal.group(1).strip()))
            except (ValueError, SyntaxError):
                default = Unparsed(literal.group(1).strip())
        else:
            default = NO_DEFAULT if publishes_defaults else UNKNOWN
        params.append(Param(name, keyword_only, default, positional_only=i < n_positional_only))
    return params


def from_python(fn: Callable) -> list[Param]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            out.append(Param("**" + p.name, True, NO_DEFAULT))
            continue
        out.append(Param(p.name, p.kind == p.KEYWORD_ONLY, normalize(p.default)))
    return out


def real_overloads(op: Any) -> list[list[Param]]:
    """Every overload of a real ttnn callable (op object, nanobind function or Python function)."""
    fn = getattr(op, "function", op)
    nb = getattr(type(fn).__call__, "__nb_signature__", None) if not inspect.isroutine(fn) else None
    nb = nb or getattr(fn, "__nb_signature__", None)
    if nb:
        return [_parse_nb(text, defaults) for text, _doc, defaults in nb]
    return [from_python(fn)]


def real_constructor_overloads(cls: Any) -> list[list[Param]]:
    """Overloads of a real ttnn class's constructor (or of the factory function standing for a class)."""
    if not isinstance(cls, type):
        return real_overloads(cls)
    nb = getattr(cls.__init__, "__nb_signature__", None)
    if nb:
        return [_parse_nb(text, defaults) for text, _doc, defaults in nb]
    return [from_python(cls.__init__)[1:]]
