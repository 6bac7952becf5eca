"""View service: serves one or more tables over gRPC until SIGTERM.

Settings (flag, or environment variable):
    --tables / GOKA_TABLES          table:codec,... e.g. clicks-table:int64,users-table:json
    --brokers / GOKA_BROKERS        bootstrap servers (required)
    --path / GOKA_VIEW_PATH         LevelDB directory (default: in memory)
    --grpc-port / GOKA_GRPC_PORT    gRPC port (default 50051; health and reflection included)
    --http-port / GOKA_HTTP_PORT    /metrics, /healthz and table reads (default 9101)

``/healthz`` is 200 once every view recovered. ``GET /tables/{table}/keys/{key}`` and
``GET /tables/{table}?prefix=&start=&limit=`` read the tables as JSON (see goka.web.tables).
On SIGTERM the server stops taking requests, finishes the running ones, and the views close
their LevelDB storage cleanly.

    python -m services.view --tables clicks-table:int64 --brokers kafka:9092 --path /data
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from pathlib import Path
from typing import Any

from goka.codec import codec_by_name
from goka.grpc.serve import ServeConfig, serve
from goka.view import View, ViewState
from goka.web import TableReads
from services.common import env, json_logging, serve_http

log = logging.getLogger("goka.services.view")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=env("TABLES"))
    parser.add_argument("--brokers", default=env("BROKERS"))
    parser.add_argument("--path", default=env("VIEW_PATH"))
    parser.add_argument("--host", default=env("HOST", "0.0.0.0"))
    parser.add_argument("--grpc-port", type=int, default=int(env("GRPC_PORT", "50051") or 50051))
    parser.add_argument("--http-port", type=int, default=int(env("HTTP_PORT", "9101") or 9101))
    args = parser.parse_args(argv)
    if not args.tables or not args.brokers:
        parser.error("--tables and --brokers (or GOKA_TABLES and GOKA_BROKERS) are required")
    json_logging()
    tables = []
    for spec in args.tables.split(","):
        table, _, codec = spec.partition(":")
        tables.append((table, codec_by_name(codec or "bytes")))
    config = ServeConfig(brokers=args.brokers, tables=tables,
                         path=Path(args.path) if args.path else None,
                         address=f"{args.host}:{args.grpc_port}")  # fmt: skip
    views: list[View[Any]] = []
    ready = threading.Event()

    def healthy() -> bool:
        return ready.is_set() and all(v.recovered and v.state is ViewState.RUNNING for v in views)

    reads = TableReads(lambda: {v.table: v for v in views})
    http = serve_http(args.http_port, healthy, routes=[reads.handle])
    log.info("view service for %s; http port %d", args.tables, args.http_port)
    try:
        return serve(config, ready=ready, views_out=views)
    finally:
        http.shutdown()
        http.server_close()


if __name__ == "__main__":
    sys.exit(main())
