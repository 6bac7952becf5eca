"""Where a URL's files are: one helper for every place that takes a path or an fsspec URL
(snapshots, the stop signal and partition board beside a processor's checkpoint, the Parquet
archive, the file sources, the connectors' positions), and the check at start that such a
place can be reached (:func:`check_location`).

On S3 and S3-compatible stores (MinIO, Ceph, R2, S3Proxy) the standard AWS settings apply, as
for every AWS SDK: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and the
shared config and credentials files, ``AWS_ENDPOINT_URL_S3`` (or ``AWS_ENDPOINT_URL``, or a
profile's ``endpoint_url``) for a store that is not AWS, ``AWS_REGION``. ``storage_options``
(s3fs's keyword arguments: ``key``, ``secret``, ``endpoint_url``, ``client_kwargs``,
``config_kwargs``) win over them.
"""

from __future__ import annotations

import contextlib
import queue
import secrets
import threading
from collections.abc import Mapping
from typing import Any

from goka.errors import ConfigurationError

__all__ = [
    "check_location", "ensure_dir", "filesystem", "is_object_store", "move", "remove",
    "write_whole",
]  # fmt: skip

#: Seconds :func:`check_location` waits for an answer.
CHECK_SECONDS = 30.0

#: The package of each fsspec protocol that needs one, and the extra that installs it.
_PACKAGES = {"s3": ("s3fs", "s3"), "gs": ("gcsfs", None), "gcs": ("gcsfs", None),
             "abfs": ("adlfs", None), "az": ("adlfs", None)}  # fmt: skip


def filesystem(
    url: str, storage_options: Mapping[str, Any] | None = None, *, local_as_none: bool = False
) -> tuple[Any, str]:
    """The fsspec file system of ``url`` and the path in it. Hadoop's ``s3a://`` and ``s3n://``
    are read as ``s3://``. With ``local_as_none``, a local path or ``file://`` URL gives
    ``(None, path)``: its caller uses ``os`` and fsspec is not imported.

    Raises:
        ConfigurationError: the URL's protocol is unknown, or its package is not installed.
    """
    if local_as_none and is_local(url):
        return None, url.removeprefix("file://")
    import fsspec.core  # imported here: only remote locations and snapshots need it

    url = fsspec_url(url)
    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except (ImportError, ValueError) as exc:
        package, extra = _PACKAGES.get(url.split("://", 1)[0], (None, None))
        if isinstance(exc, ImportError) and package:
            install = f"'goka-py[{extra}]'" if extra else package
            raise ConfigurationError(f"cannot use {url!r}: {package} is not installed; "
                                     f"pip install {install}") from exc  # fmt: skip
        raise ConfigurationError(f"cannot use {url!r}: {exc}") from exc
    return fs, str(path)


#: fsspec protocols of object stores: a put is atomic (an object is there whole or not at
#: all) and there is no rename (fsspec's ``mv`` copies, then deletes).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "adl"})


def is_object_store(fs: Any) -> bool:
    """Whether ``fs`` is an object store (see :data:`OBJECT_STORES`)."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    return any(p in OBJECT_STORES for p in protocols)


def ensure_dir(fs: Any, path: str) -> None:
    """Make folder ``path`` where folders exist; nothing on an object store (s3fs's makedirs
    asks for the bucket, and tries to create it where a policy allows only the prefix)."""
    if not is_object_store(fs):
        fs.makedirs(path, exist_ok=True)


def write_whole(fs: Any, path: str, data: bytes | None = None, *, local: str | None = None,
                ) -> None:  # fmt: skip
    """Write ``data`` (or the file ``local``) at ``path`` whole or not at all: on an object
    store a single put (atomic there), elsewhere a temporary name beside it, renamed."""
    if is_object_store(fs):
        fs.pipe_file(path, data) if local is None else fs.put_file(local, path)
        return
    temporary = f"{path}.{secrets.token_hex(4)}.tmp"  # (writers of one path at once)
    fs.pipe_file(temporary, data) if local is None else fs.put_file(local, temporary)
    fs.mv(temporary, path)


def move(fs: Any, source: str, target: str) -> None:
    """Move one file: a rename, or on an object store a copy and then a delete of the one
    object (a crash in between leaves both: the caller's recovery moves it again)."""
    if is_object_store(fs):
        fs.copy(source, target)
        fs.rm_file(source)
    else:
        fs.mv(source, target)


def remove(fs: Any, path: str, *, recursive: bool = False) -> None:
    """Delete ``path`` (with ``recursive``, every file under it), one object at a time on an
    object store: S3's multi-object delete needs a Content-MD5 header that botocore 1.36+ no
    longer sends (it sends a CRC32 checksum instead), and S3-compatible stores such as
    S3Proxy, older MinIO and Ceph releases refuse it ("NotImplemented").

    Raises:
        FileNotFoundError: ``path`` is not there (without ``recursive``).
    """
    if not is_object_store(fs):
        fs.rm(path, recursive=recursive)
        return
    if not recursive:
        fs.rm_file(path)
        return
    for found in fs.find(path):
        fs.rm_file(found)
    fs.invalidate_cache(path)


def is_local(url: str) -> bool:
    """Whether ``url`` is a local path or a ``file://`` URL."""
    return "://" not in url or url.startswith("file://")


def fsspec_url(url: str) -> str:
    """``url`` as fsspec names it: Hadoop's ``s3a://`` and ``s3n://`` are ``s3://``."""
    for hadoop in ("s3a://", "s3n://"):
        if url.startswith(hadoop):
            return "s3://" + url[len(hadoop) :]
    return url


def check_location(url: str, storage_options: Mapping[str, Any] | None = None, *,
                   what: str = "", timeout: float = CHECK_SECONDS) -> None:  # fmt: skip
    """Check that ``url``'s store answers, accepts the credentials and has its bucket (a
    listing of the bucket at the URL's prefix): a wrong endpoint, credential or bucket fails
    here, before anything starts, with one error naming the URL, not later from inside a task.
    Local paths are not checked (their errors are clear where they happen).

    Raises:
        ConfigurationError: the store cannot be used (why, in words, and the URL); or it did
            not answer within ``timeout`` seconds.
    """
    if is_local(url):
        return
    label = f"{what} {url}" if what else url
    fs, path = filesystem(url, _bounded(url, storage_options, timeout))
    done: queue.Queue[BaseException | None] = queue.Queue()

    def probe() -> None:
        try:
            _probe(fs, path)
            done.put(None)
        except BaseException as exc:  # (handed to the caller)
            done.put(exc)

    # a daemon thread: a store that never answers must not keep the process from exiting
    threading.Thread(target=probe, name="goka-check", daemon=True).start()
    try:
        failed = done.get(timeout=timeout)
    except queue.Empty:
        raise ConfigurationError(f"{label}: its store did not answer within {timeout:g}s "
                                 f"({_endpoint(fs)})") from None  # fmt: skip
    if failed is not None:  # (botocore's, aiohttp's, fsspec's: named in the message)
        raise ConfigurationError(f"{label}: {_why(failed, fs, path)}") from failed


def _bounded(url: str, options: Mapping[str, Any] | None, timeout: float) -> dict[str, Any]:
    """``options`` for a client of its own whose calls give up within ``timeout``: on S3,
    connect and read timeouts below it and one retry (botocore's default retries a refused
    connection for seconds)."""
    bounded: dict[str, Any] = {**(options or {}), "skip_instance_cache": True}
    if fsspec_url(url).startswith("s3://"):
        seconds = max(1.0, min(10.0, timeout / 3))
        bounded["config_kwargs"] = {"connect_timeout": seconds, "read_timeout": seconds,
                                    "retries": {"max_attempts": 2},
                                    **(bounded.get("config_kwargs") or {})}  # fmt: skip
    return bounded


def _probe(fs: Any, path: str) -> None:
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple | list) else fs.protocol
    if protocol in ("s3", "s3a"):
        bucket, _, key = path.partition("/")
        # a listing, not exists(): some S3-compatible servers answer GetBucketLocation for
        # any name, and exists() says True for a bucket that is not there; under the key as
        # a folder, as the code that uses it lists (a policy may allow only "key/*")
        prefix = f"{key.rstrip('/')}/" if key.strip("/") else ""
        fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1,
                   **getattr(fs, "req_kw", {}))  # fmt: skip
        return
    # (exists() would swallow the store's errors); a folder not made yet is made by a write
    with contextlib.suppress(FileNotFoundError):
        fs.ls(path.rstrip("/") or path, detail=False)


def _why(exc: BaseException, fs: Any, path: str) -> str:
    """What went wrong, in words a user acts on."""
    text = str(exc) or type(exc).__name__
    name = type(exc).__name__
    bucket = path.partition("/")[0]
    if isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text \
            or "SignatureDoesNotMatch" in text or "InvalidAccessKeyId" in text:  # fmt: skip
        return (
            f"access denied ({text}): check the credentials (AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or storage options key/secret) and "
            f"the endpoint ({_endpoint(fs)})"
        )
    if "NoSuchBucket" in text or isinstance(exc, FileNotFoundError):
        return (
            f"bucket {bucket!r} does not exist at {_endpoint(fs)} ({text}): create it, "
            f"or name another"
        )
    if "NoCredentials" in name or "credentials" in text.lower():
        return (
            f"no credentials ({text}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            f"AWS_PROFILE, or storage options key/secret"
        )
    if "Connect" in name or "connect" in text.lower():
        return f"cannot reach its store at {_endpoint(fs)} ({text})"
    return f"{name}: {text}"


def _endpoint(fs: Any) -> str:
    """The endpoint ``fs`` talks to, for messages."""
    endpoint = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get(
        "endpoint_url"
    )
    if not endpoint:
        try:
            endpoint = fs.s3.meta.endpoint_url
        except AttributeError:  # (not connected yet, or not S3)
            endpoint = None
    return f"endpoint {endpoint}" if endpoint else "the default endpoint"
