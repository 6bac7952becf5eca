"""The declaration of a PostgreSQL table sink (see :mod:`goka.connect.postgres`): checked at
once, so a bad name, mode or policy fails where it is declared, not mid-stream."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from goka.codec import Codec
from goka.connect.columns import NAME
from goka.errors import ConfigurationError

__all__ = ["Mode", "PostgresSink"]

Mode = Literal["upsert", "append"]


@dataclass(frozen=True)
class PostgresSink:
    """A table topic materialised into a PostgreSQL table (see the module docstring).

    Args:
        topic: the table topic (a group table, or a stream with keys).
        codec: decodes the values.
        dsn: the libpq connection string (``host=... dbname=...``, or a URL).
        table: the target table (created at the first write if ``create``).
        mode: ``"upsert"`` (one row per key, deleted by a tombstone) or ``"append"`` (one row
            per record).
        mapper: ``mapper(key, value) -> dict`` of columns (default: a dict value's fields, or a
            ``value`` column).
        create: create the table and add columns for new fields; else the table must exist
            with every column.
        schema: the table's schema.
        name: the sink's name in the offsets table (default: the table's).
        offsets_table: where each partition's next offset is kept.
        on_error: ``"fail"`` (default) or ``"skip"`` (logged and counted) for a record that
            cannot be decoded, mapped or stored.

    Raises:
        ConfigurationError: an invalid name, mode, policy or mapper.
    """

    topic: str
    codec: Codec[Any]
    dsn: str
    table: str
    mode: Mode = "upsert"
    mapper: Callable[[str, Any], Mapping[str, Any]] | None = None
    create: bool = True
    schema: str = "public"
    name: str = ""
    offsets_table: str = "goka_sink_offsets"
    on_error: Literal["fail", "skip"] = "fail"

    def __post_init__(self) -> None:
        where = f"PostgreSQL sink of {self.topic!r}"
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigurationError(f"{where}: topic must be a non-empty str")
        if not isinstance(self.codec, Codec):
            raise ConfigurationError(f"{where}: codec must be a goka Codec, got {self.codec!r}")
        for what in ("table", "schema", "offsets_table"):
            if not NAME.match(getattr(self, what)):
                found = getattr(self, what)
                raise ConfigurationError(f"{where}: {what} must be a plain SQL name (letters, "
                                         f"digits, _; 63 at most), got {found!r}")  # fmt: skip
        if self.mode not in ("upsert", "append"):
            raise ConfigurationError(f"{where}: mode must be 'upsert' or 'append', "
                                     f"got {self.mode!r}")  # fmt: skip
        if self.on_error not in ("fail", "skip"):
            raise ConfigurationError(f"{where}: on_error must be 'fail' or 'skip', "
                                     f"got {self.on_error!r}")  # fmt: skip
        if self.mapper is not None and not callable(self.mapper):
            raise ConfigurationError(f"{where}: mapper must be callable(key, value)")
        if not isinstance(self.dsn, str) or not self.dsn:
            raise ConfigurationError(f"{where}: dsn must be a libpq connection string")
        if not self.name:
            object.__setattr__(self, "name", self.table)
