"""How the text of a setting is read and checked: micro-batch triggers, Spark masters and
storage options (used at declaration by :mod:`goka.processing.settings`, and where they are
used)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from goka.errors import ConfigurationError

__all__ = ["LOG_LEVELS", "TRIGGER", "TRIGGER_UNITS", "check_master", "json_options", "merged",
           "trigger_seconds"]  # fmt: skip

#: The units a micro-batch trigger is given in (Spark's interval units, singular or plural), in
#: seconds.
TRIGGER_UNITS = {"microsecond": 1e-6, "millisecond": 0.001, "second": 1.0, "minute": 60.0,
                 "hour": 3600.0, "day": 86_400.0, "week": 604_800.0}  # fmt: skip
_TRIGGER_PART = re.compile(r"\+?(\d+(?:\.\d*)?|\.\d+)\s+([a-z]+?)s?(?:\s+|$)")
#: The micro-batch trigger when none is given.
TRIGGER = "1 second"
#: The log levels of the workers' ``log_level``.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: The masters Spark takes: ``local``, ``local[N]`` / ``local[*]`` (with ``,F`` failures),
#: ``local-cluster[...]``, ``yarn``, and a cluster manager's URL (``spark://``, ``k8s://``).
MASTER = re.compile(r"local|local\[\s*(?:[1-9]\d*|\*)\s*(?:,\s*[1-9]\d*\s*)?\]"
                    r"|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]|yarn"
                    r"|[a-z][a-z0-9+.-]*://\S+")  # fmt: skip


def check_master(master: str | None) -> None:
    """Raise for a master Spark would refuse when the session starts (``local[zero]``).

    Raises:
        ConfigurationError: ``master`` is none of :data:`MASTER`'s forms.
    """
    if master is not None and not (isinstance(master, str) and MASTER.fullmatch(master)):
        raise ConfigurationError(
            f"master must be local, local[N] (N >= 1 threads, or *), spark://host:port, yarn "
            f"or k8s://...; got {master!r}"
        )


def trigger_seconds(trigger: str) -> float:
    """The seconds of a micro-batch ``trigger``: one or more ``<number> <unit>`` of
    :data:`TRIGGER_UNITS` (``"200 milliseconds"``, ``"1 minute 30 seconds"``).

    Raises:
        ConfigurationError: ``trigger`` is not such a duration.
    """
    text = trigger.strip().lower() if isinstance(trigger, str) else ""
    text = text.removeprefix("interval").strip()  # (Spark's "interval 10 seconds")
    seconds, at = 0.0, 0
    for part in _TRIGGER_PART.finditer(text):
        fraction = "." in part.group(1) and part.group(2) != "second"  # (Spark's rule)
        if part.start() != at or part.group(2) not in TRIGGER_UNITS or fraction:
            break
        seconds += float(part.group(1)) * TRIGGER_UNITS[part.group(2)]
        at = part.end()
    else:
        if text and at == len(text):
            return seconds
    raise ConfigurationError(
        f"trigger must be a duration such as '500 milliseconds', '2 seconds' or '1 minute 30 "
        f"seconds' (units: {', '.join(u + 's' for u in TRIGGER_UNITS)}), or 'available-now'; "
        f"got {trigger!r}"
    )


def json_options(text: str) -> dict[str, Any]:
    """A JSON object given on the command line (``--storage-options '{"endpoint_url": ...}'``).

    Raises:
        ConfigurationError: not a JSON object.
    """
    try:  # (the text is never echoed: it may hold a secret)
        found = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"not JSON: {exc}") from None
    if not isinstance(found, dict):
        raise ConfigurationError(f"a JSON object is expected, got a {type(found).__name__}")
    return found


def merged(base: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """``more`` over ``base``, a nested mapping merged key by key (s3fs's ``client_kwargs``
    and ``config_kwargs`` of both are kept)."""
    out = dict(base)
    for key, value in more.items():
        below = out.get(key)
        both = isinstance(value, Mapping) and isinstance(below, Mapping)
        out[key] = merged(below, value) if both else value  # type: ignore[arg-type]
    return out
