"""A client of the gRPC view service that decodes values with the codec each answer names."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from goka.codec import Codec, codec_by_name
from goka.errors import (
    ConfigurationError,
    GokaError,
    TableNotServedError,
    ViewNotReadyError,
    ViewUnreachableError,
)
from goka.grpc.v1 import view_pb2, view_pb2_grpc
from goka.keys import key_bytes, key_str

__all__ = ["REASON", "ClientTls", "TableNotServedError", "ViewClient", "ViewInfo"]

#: The trailing metadata key with which the server says why a table is UNAVAILABLE.
REASON = "goka-reason"


@dataclass(frozen=True)
class ViewInfo:
    """What the server says about one table."""

    table: str
    state: str
    recovered: bool
    codec: str
    applied: int
    partitions: dict[int, tuple[int, int | None, int | None]]  # offset, high watermark, lag


@dataclass(frozen=True)
class ClientTls:
    """Client TLS: PEM files of the CA that signed the server's certificate (None: the
    system's roots) and, for a server that requires mutual TLS, the client's certificate
    chain and private key."""

    ca_file: str | Path | None = None
    cert_file: str | Path | None = None
    key_file: str | Path | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        """Return the channel credentials.

        Raises:
            ConfigurationError: only one of certificate and key, or a file cannot be read.
        """
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigurationError("a client certificate and its key go together")
        try:
            read = [None if f is None else Path(f).read_bytes()
                    for f in (self.ca_file, self.key_file, self.cert_file)]  # fmt: skip
        except OSError as exc:
            raise ConfigurationError(f"TLS: cannot read {exc.filename}: {exc.strerror}") from exc
        return grpc.ssl_channel_credentials(*read)


class ViewClient:
    """Reads tables from a view server. Thread-safe; a context manager.

    Values are decoded with the codec named in each answer (``json``, ``int64``, ``string``,
    ``bytes``); pass ``codecs={"table": codec}`` for others (Avro, protobuf).

    Args:
        target: ``host:port`` of the server.
        codecs: codecs by table, overriding the names the server sends.
        tls: TLS settings (None: plaintext); with a client certificate for mutual TLS.
        root_certificates: shorthand for ``tls=ClientTls(ca_file=root_certificates)``.
        timeout: default deadline of each call, in seconds.
        scan_timeout: deadline of a whole scan, in seconds.

    Raises (from every call):
        TableNotServedError: the server does not serve the table.
        ViewNotReadyError: the table is there but not ready (recovering, rebuilding, failed).
        ViewUnreachableError: the server cannot be reached (refused, TLS failed, timed out).
        ConfigurationError: the request was refused as malformed or too large.
    """

    def __init__(
        self,
        target: str,
        *,
        codecs: Mapping[str, Codec[Any]] | None = None,
        tls: ClientTls | None = None,
        root_certificates: str | Path | None = None,
        timeout: float = 10.0,
        scan_timeout: float = 300.0,
    ) -> None:
        if tls is not None and root_certificates is not None:
            raise ConfigurationError("pass tls= or root_certificates=, not both")
        if root_certificates is not None:
            tls = ClientTls(ca_file=root_certificates)
        if tls is None:
            self._channel = grpc.insecure_channel(target)
        else:
            self._channel = grpc.secure_channel(target, tls.credentials())
        self.target = target
        self._stub = view_pb2_grpc.ViewServiceStub(self._channel)
        self._codecs = dict(codecs or {})
        self.timeout, self.scan_timeout = timeout, scan_timeout

    def _decoder(self, table: str, name: str) -> Codec[Any]:
        codec = self._codecs.get(table)
        if codec is None:
            try:
                codec = self._codecs[table] = codec_by_name(name)
            except ConfigurationError as exc:
                raise ConfigurationError(
                    f"table {table!r} uses codec {name!r}: pass codecs={{{table!r}: ...}}"
                ) from exc
        return codec

    def _call(self, method: Any, request: Any, table: str) -> Any:
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _translate(exc, table, self.target) from exc

    def get(self, table: str, key: str | bytes) -> Any:
        """Return the decoded value of ``key`` (text or any bytes: :mod:`goka.keys`) in
        ``table``, or None."""
        request = view_pb2.GetRequest(table=table, key=key_bytes(key))
        answer = self._call(self._stub.Get, request, table)
        return self._decoder(table, answer.codec).decode(answer.value) if answer.found else None

    def get_many(self, table: str, keys: Sequence[str | bytes]) -> dict[str, Any]:
        """Return ``{key: value}`` for the ``keys`` that have a value (keys as ``str``, in
        :mod:`goka.keys`'s form)."""
        request = view_pb2.GetManyRequest(table=table, keys=[key_bytes(k) for k in keys])
        answer = self._call(self._stub.GetMany, request, table)
        decode = self._decoder(table, answer.codec).decode
        return {key_str(e.key): decode(e.value) for e in answer.entries if e.found}

    def scan(
        self,
        table: str,
        *,
        prefix: str | bytes = "",
        start: str | bytes = "",
        stop: str | bytes | None = None,
        limit: int = 0,
        reverse: bool = False,
    ) -> Iterator[tuple[str, Any]]:
        """Yield ``(key, value)`` in key (byte) order; stop iterating to cancel the stream."""
        request = view_pb2.ScanRequest(
            table=table, prefix=key_bytes(prefix), start=key_bytes(start),
            stop=None if stop is None else key_bytes(stop), limit=limit, reverse=reverse,
        )  # fmt: skip
        stream = self._stub.Scan(request, timeout=self.scan_timeout)
        try:
            for answer in stream:
                decode = self._decoder(table, answer.codec).decode
                for entry in answer.entries:
                    yield key_str(entry.key), decode(entry.value)
        except grpc.RpcError as exc:
            raise _translate(exc, table, self.target) from exc
        finally:
            stream.cancel()

    def info(self, table: str = "") -> list[ViewInfo]:
        """Return the state of ``table``, or of every served table."""
        answer = self._call(self._stub.Info, view_pb2.InfoRequest(table=table), table)
        return [_info(t) for t in answer.tables]

    def close(self) -> None:
        """Close the channel. Idempotent."""
        self._channel.close()

    def __enter__(self) -> ViewClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _info(table: Any) -> ViewInfo:
    partitions = {
        p.partition: (
            p.offset,
            p.high_watermark if p.HasField("high_watermark") else None,
            p.lag if p.HasField("lag") else None,
        )
        for p in table.partitions
    }
    return ViewInfo(
        table.table, table.state, table.recovered, table.codec, table.applied, partitions
    )


def _translate(error: grpc.RpcError, table: str, target: str) -> GokaError:
    code = error.code() if isinstance(error, grpc.Call) else None
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    trailing = dict(error.trailing_metadata() or ()) if isinstance(error, grpc.Call) else {}
    if code == grpc.StatusCode.NOT_FOUND:
        return TableNotServedError(details)
    if code == grpc.StatusCode.UNAVAILABLE and trailing.get(REASON):
        return ViewNotReadyError(f"table {table!r}: {details}")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ViewUnreachableError(
            f"view service {target} cannot be reached ({code.name}: {details}): is it "
            "running there, and do its TLS settings match the client's?"
        )
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ConfigurationError(f"table {table!r}: {details}")
    if code == grpc.StatusCode.CANCELLED:
        return GokaError(
            f"view service {target} ended the scan of table {table!r} ({details}): the server "
            "cancels scans that stall or run too long; read faster or scan less at once"
        )
    name = code.name if code is not None else "unknown status"
    return GokaError(f"view service call for table {table!r} failed ({name}): {details}")
