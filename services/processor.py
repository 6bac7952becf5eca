"""Processor service: runs a group graph as a Spark Structured Streaming job until SIGTERM.

Settings (flag, or environment variable):
    --graph / GOKA_GRAPH            module:attribute of the group graph (required)
    --brokers / GOKA_BROKERS        bootstrap servers (required)
    --master / GOKA_SPARK_MASTER    local[2] (default) or spark://host:7077
    --state-dir / GOKA_STATE_DIR    partition stores (default: goka-state, per executor)
    --checkpoint-dir / GOKA_CHECKPOINT_DIR   Spark checkpoint (shared storage on a cluster)
    --mode / GOKA_MODE              continuous (default) or micro-batch
    --trigger / GOKA_TRIGGER        micro-batch interval (default: 1 second)
    --on-error / GOKA_ON_ERROR      fail | skip | dead_letter
    --snapshot-interval / GOKA_SNAPSHOT_INTERVAL   seconds between state snapshots (default 30)
    --snapshot-dir / GOKA_SNAPSHOT_DIR   snapshot location, path or URL (default
                                    <checkpoint-dir>/state)
    --http-port / GOKA_HTTP_PORT    /metrics and /healthz (default 9100)

On SIGTERM the query stops after abandoning or finishing the current micro-batch: a batch's
state is committed only after its outputs were acknowledged, so an abandoned one is redone.
``/healthz`` is 200 while the streaming query is active.

    python -m services.processor --graph examples.click_count.group:graph --brokers kafka:9092
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from goka.graph import load_graph
from services.common import env, json_logging, serve_http

log = logging.getLogger("goka.services.processor")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default=env("GRAPH"))
    parser.add_argument("--brokers", default=env("BROKERS"))
    parser.add_argument("--master", default=env("SPARK_MASTER"))
    parser.add_argument("--state-dir", default=env("STATE_DIR"))
    parser.add_argument("--checkpoint-dir", default=env("CHECKPOINT_DIR"))
    parser.add_argument("--mode", default=env("MODE", "continuous"),
                        choices=["continuous", "micro-batch"])  # fmt: skip
    parser.add_argument("--trigger", default=env("TRIGGER", "1 second"))
    parser.add_argument("--on-error", default=env("ON_ERROR", "fail"))
    parser.add_argument(
        "--snapshot-interval", type=float, default=float(env("SNAPSHOT_INTERVAL", "30") or 30)
    )
    parser.add_argument("--snapshot-dir", default=env("SNAPSHOT_DIR"))
    parser.add_argument("--http-port", type=int, default=int(env("HTTP_PORT", "9100") or 9100))
    args = parser.parse_args(argv)
    if not args.graph or not args.brokers:
        parser.error("--graph and --brokers (or GOKA_GRAPH and GOKA_BROKERS) are required")
    json_logging()
    from goka.spark import Processor

    processor = Processor(
        load_graph(args.graph), args.brokers, master=args.master, state_dir=args.state_dir,
        checkpoint_dir=args.checkpoint_dir, mode=args.mode, trigger=args.trigger,
        on_error=args.on_error,
        snapshot_interval=args.snapshot_interval, snapshot_dir=args.snapshot_dir,
    )  # fmt: skip
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: processor.stop())
    http = serve_http(args.http_port, lambda: bool(processor.status()["active"]))
    log.info(
        "processor service for group %s on http port %d", processor.graph.group, args.http_port
    )
    try:
        processor.run()
    except Exception:
        log.exception("processor failed")
        return 1
    finally:
        http.shutdown()
        http.server_close()
    log.info("processor stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
