"""``goka table get|scan``: read a table through a view service's gRPC port."""

from __future__ import annotations

import argparse
import base64
import json
import threading
from typing import Any

from goka.commands.options import add, at_least, seconds

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    table = commands.add_parser("table", help="read tables from a view service over gRPC")
    sub = table.add_subparsers(dest="table_command", required=True, metavar="COMMAND")
    get = sub.add_parser("get", help="print the value of keys (JSON, one line each)")
    get.add_argument("table", help="table topic, e.g. clicks-table")
    get.add_argument("keys", nargs="+", metavar="KEY", help="keys")
    scan = sub.add_parser("scan", help="print keys and values in key order (JSON lines)")
    scan.add_argument("table", help="table topic")
    scan.add_argument("--prefix", default="", help="only keys starting with this (default: all)")
    scan.add_argument("--start", default="", help="first key, inclusive (default: the first)")
    scan.add_argument("--limit", type=at_least(0), default=100,
                      help="most entries (0: all; default 100)")  # fmt: skip
    for parser in (get, scan):
        add(parser, "--view", "the view service's gRPC address", default="127.0.0.1:50051")
        add(parser, "--tls-ca", "PEM CA that signed the service's certificate (enables TLS)")
        add(parser, "--timeout", "seconds for each call", default=10.0, type=seconds)
    get.set_defaults(run=_get)
    scan.set_defaults(run=_scan)


def _client(args: argparse.Namespace) -> Any:
    from goka.grpc.client import ClientTls, ViewClient

    tls = ClientTls(ca_file=args.tls_ca) if args.tls_ca else None
    return ViewClient(args.view, tls=tls, timeout=args.timeout, scan_timeout=args.timeout * 30)


def _shown(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    return value


def _line(key: str, value: Any) -> str:
    return json.dumps({"key": key, "value": _shown(value)}, default=str, ensure_ascii=False)


def _get(args: argparse.Namespace, stop: threading.Event) -> int:
    client = _client(args)
    missing = 0
    try:
        for key in args.keys:
            value = client.get(args.table, key)
            missing += value is None
            print(_line(key, value), flush=True)
    finally:
        client.close()
    return 1 if missing else 0


def _scan(args: argparse.Namespace, stop: threading.Event) -> int:
    client = _client(args)
    try:
        rows = client.scan(args.table, prefix=args.prefix, start=args.start, limit=args.limit)
        for key, value in rows:
            print(_line(key, value), flush=True)
            if stop.is_set():
                break
    finally:
        client.close()
    return 0
