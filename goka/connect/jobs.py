"""Which job runs which source declaration (for the command line and services)."""

from __future__ import annotations

from typing import Any

from goka.connect.files import FileSource, FileSourceJob
from goka.connect.postgres_cdc import PostgresCdcSource, PostgresCdcSourceJob
from goka.connect.postgres_source import PostgresSource, PostgresSourceJob
from goka.connect.source_job import SourceJob
from goka.errors import ConfigurationError

__all__ = ["SOURCES", "source_job"]

_JOBS: dict[type, type[SourceJob[Any]]] = {
    FileSource: FileSourceJob,
    PostgresSource: PostgresSourceJob,
    PostgresCdcSource: PostgresCdcSourceJob,
}
#: The source declarations.
SOURCES = tuple(_JOBS)


def source_job(source: Any, brokers: str, *,
               kafka_config: dict[str, Any] | None = None) -> SourceJob[Any]:  # fmt: skip
    """The job that runs ``source`` in this process.

    Raises:
        ConfigurationError: ``source`` is not a source declaration.
    """
    job = _JOBS.get(type(source))
    if job is None:
        raise ConfigurationError(f"not a source: {source!r}")
    made: SourceJob[Any] = job(source, brokers, kafka_config=kafka_config)
    return made
