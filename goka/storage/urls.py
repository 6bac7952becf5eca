"""Where a URL's files are: one helper for every place that takes a path or an fsspec URL
(snapshots, and the stop signal and partition board beside a processor's checkpoint)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from goka.errors import ConfigurationError

__all__ = ["filesystem"]


def filesystem(
    url: str, storage_options: Mapping[str, Any] | None = None, *, local_as_none: bool = False
) -> tuple[Any, str]:
    """The fsspec file system of ``url`` and the path in it. Hadoop's ``s3a://`` and ``s3n://``
    are read as ``s3://``. With ``local_as_none``, a local path or ``file://`` URL gives
    ``(None, path)``: its caller uses ``os`` and fsspec is not imported.

    Raises:
        ConfigurationError: the URL's protocol is unknown, or its package is not installed.
    """
    if local_as_none and ("://" not in url or url.startswith("file://")):
        return None, url.removeprefix("file://")
    import fsspec.core  # imported here: only remote locations and snapshots need it

    for hadoop in ("s3a://", "s3n://"):
        if url.startswith(hadoop):
            url = "s3://" + url[len(hadoop) :]
    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise ConfigurationError(f"cannot use {url!r}: {exc}") from exc
    return fs, str(path)
