"""What the connector tests compare tables with, computed here from what was produced."""

from __future__ import annotations

from typing import Any

from goka import StringCodec

from ..helpers import produce


def last_values(written: list[tuple[str, Any]]) -> dict[str, int]:
    """Each key's last value's ``n`` (a None value, a tombstone, deletes the key)."""
    table: dict[str, int] = {}
    for key, value in written:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value["n"]
    return table


def forget_progress(brokers: str, name: str) -> None:
    """Drop what source ``name`` noted in its progress topic (as if the crash came before a
    flush noted it)."""
    produce(brokers, f"goka-source-{name}", StringCodec(), [(name, None)])
