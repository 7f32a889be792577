"""Validation errors of the host backend.

The real ttnn raises ``RuntimeError("TT_FATAL @ <file>:<line>: <condition> | <message>")`` when an op
rejects its arguments; the host backend raises the same type so that code handling one handles both.
"""

from collections.abc import Callable


class TTFatal(RuntimeError):
    """An op rejected its arguments (the host counterpart of ttnn's ``TT_FATAL``)."""


def check(condition: bool, op: str, message: str | Callable[[], str]) -> None:
    """Raise :class:`TTFatal` naming ``op`` when ``condition`` does not hold.

    ``message`` may be a function giving it: ops run their checks at every call, and a message quoting shapes costs
    microseconds to format (decode runs hundreds of ops a step).
    """
    if not condition:
        raise TTFatal(f"{op}: {message() if callable(message) else message}")


def unsupported(op: str, what: str) -> NotImplementedError:
    """An argument the real op accepts but the host backend does not model (yet)."""
    return NotImplementedError(f"{op}: {what} is not supported by the tt-models host backend")
