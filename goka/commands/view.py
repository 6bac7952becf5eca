"""``goka view serve``: views of table topics behind the gRPC service and the HTTP port."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import threading
from pathlib import Path
from typing import Any

from goka.commands.options import (
    HTTP_PORTS,
    add,
    add_brokers,
    add_http,
    at_least,
    brokers,
    port,
    seconds,
)
from goka.errors import UsageError

__all__ = ["codec_from_spec", "register"]

log = logging.getLogger("goka.view")

SIMPLE = ("bytes", "string", "int64", "json")
CODECS = "bytes, string, int64, json, avro:SCHEMA.avsc, avro-registry:URL, protobuf:MODULE.CLASS"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    view = commands.add_parser("view", help="views of table topics")
    sub = view.add_subparsers(dest="view_command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve", help="serve tables over gRPC and HTTP until Ctrl-C or SIGTERM",
        description="Keep a local copy of each table and serve it over gRPC (Get, GetMany, "
        "Scan, Info, health, reflection) and HTTP (/tables/..., /metrics, /healthz, /readyz).",
    )  # fmt: skip
    serve.add_argument("--table", action="append",
                       help="table topic to serve, repeatable (no default; env GOKA_TABLES, "
                       "comma-separated)")  # fmt: skip
    serve.add_argument("--codec", action="append",
                       help=f"codec of the values: {CODECS}; one for all tables or one per "
                       "--table (default: bytes; env GOKA_CODECS, comma-separated)")  # fmt: skip
    add_brokers(serve)
    add(serve, "--path", "directory of the LevelDB stores, which survive restarts (without "
        "it: each table in memory, read again at each start)")  # fmt: skip
    add(serve, "--host", "address of the gRPC port", default="127.0.0.1")
    add(serve, "--port", "gRPC port (0: any free port)", default=50051, type=port)
    add_http(serve, HTTP_PORTS["view"])
    add(serve, "--tls-cert", "PEM certificate chain (enables TLS)")
    add(serve, "--tls-key", "PEM private key of the certificate")
    add(serve, "--tls-client-ca", "PEM CA of client certificates: serve only clients it signed")
    add(serve, "--max-streams", "most scans at once; more are refused", default=16,
        type=at_least(1))  # fmt: skip
    add(serve, "--stream-idle-timeout", "cancel a scan whose client reads nothing for this "
        "many seconds", default=10.0, type=seconds)  # fmt: skip
    add(serve, "--max-request-bytes", "largest request accepted", default=1 << 20,
        type=at_least(1))  # fmt: skip
    add(serve, "--grace", "seconds running requests get at shutdown", default=5.0, type=seconds)
    serve.add_argument("--allow-stale-reads", action="store_true",
                       help="serve reads before the views recovered")  # fmt: skip
    serve.set_defaults(run=run)


def codec_from_spec(spec: str, table: str) -> Any:
    """The codec a ``--codec`` value names (see CODECS)."""
    from goka.codec import AvroCodec, ProtobufCodec, codec_by_name
    from goka.errors import ConfigurationError

    kind, _, argument = spec.partition(":")
    if kind not in ("avro", "avro-registry", "protobuf") and (argument or kind not in SIMPLE):
        raise UsageError(f"--codec {spec!r}: expected one of {CODECS}")
    try:
        if kind == "avro" and argument:
            return AvroCodec(Path(argument).read_text())
        if kind == "avro-registry" and argument:
            from goka.kafka import SchemaRegistryAvroCodec

            return SchemaRegistryAvroCodec({"url": argument}, f"{table}-value")
        if kind == "protobuf" and argument:
            module, _, name = argument.rpartition(".")
            return ProtobufCodec(getattr(importlib.import_module(module), name))
        if not argument:
            return codec_by_name(kind)
    except (OSError, ImportError, AttributeError, ValueError, ConfigurationError) as exc:
        raise UsageError(f"--codec {spec!r} for table {table!r}: {exc}") from exc
    raise UsageError(f"--codec {spec!r}: expected one of {CODECS}")


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.grpc.serve import ServeConfig, serve
    from goka.grpc.server import TlsConfig

    tables = args.table or [t for t in os.environ.get("GOKA_TABLES", "").split(",") if t]
    if not tables:
        raise UsageError("no table: pass --table TOPIC (or set GOKA_TABLES)")
    codecs = args.codec or [c for c in os.environ.get("GOKA_CODECS", "").split(",") if c]
    codecs = codecs or ["bytes"]
    if len(codecs) not in (1, len(tables)):
        raise UsageError("give one --codec for all tables or one per --table")
    names = codecs * len(tables) if len(codecs) == 1 else codecs
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise UsageError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
    tls = TlsConfig(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    config = ServeConfig(
        brokers=brokers(args),
        tables=[(t, codec_from_spec(c, t)) for t, c in zip(tables, names, strict=True)],
        path=Path(args.path) if args.path else None,
        address=f"{args.host}:{args.port}",
        http_host=args.http_host,
        http_port=args.http_port,
        tls=tls,
        allow_stale_reads=args.allow_stale_reads,
        max_request_bytes=args.max_request_bytes,
        max_streams=args.max_streams,
        stream_idle_timeout=args.stream_idle_timeout,
        grace=args.grace,
    )
    return serve(config, stop)
