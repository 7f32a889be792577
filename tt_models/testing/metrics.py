"""Reading a server's ``/metrics``: one sample of its Prometheus exposition text."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r'^(?P<name>[\w:]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


def metric(text: str, name: str, default: float | None = None, **labels: str) -> float:
    """The value of one sample of Prometheus exposition ``text``. A missing sample raises LookupError (a renamed or
    vanished gauge must not read as 0), unless a ``default`` is given: a labelled counter has no sample before its
    first increment."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match["name"] == name:
            found = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(match["value"])
    if default is None:
        raise LookupError(f"no sample of {name} with {labels} in the metrics")
    return default
