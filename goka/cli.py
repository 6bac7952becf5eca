"""The ``goka`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _broker(args: argparse.Namespace) -> int:
    from goka.dev import EmbeddedBroker

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with EmbeddedBroker(port=args.port) as broker:
        print(f"embedded Kafka broker listening; bootstrap servers: {broker.bootstrap}", flush=True)
        while not stop.wait(0.5):
            if not broker.running:
                print(f"broker exited:\n{broker.log_tail()}", file=sys.stderr)
                return 1
    return 0


def _brokers(value: str | None) -> str:
    brokers = value or os.environ.get("GOKA_BROKERS")
    if not brokers:
        raise SystemExit("no Kafka brokers: pass --brokers host:port[,...] or set GOKA_BROKERS")
    return brokers


def _view_serve(args: argparse.Namespace) -> int:
    from goka.codec import codec_by_name
    from goka.grpc.serve import ServeConfig, serve
    from goka.grpc.server import TlsConfig

    codecs = args.codec or ["bytes"]
    if len(codecs) not in (1, len(args.table)):
        raise SystemExit("give one --codec for all tables or one per --table")
    names = codecs * len(args.table) if len(codecs) == 1 else codecs
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise SystemExit("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
    tls = TlsConfig(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    config = ServeConfig(
        brokers=_brokers(args.brokers),
        tables=[(t, codec_by_name(c)) for t, c in zip(args.table, names, strict=True)],
        path=Path(args.path) if args.path else None,
        address=f"{args.host}:{args.port}",
        metrics_port=args.metrics_port,
        tls=tls,
        allow_stale_reads=args.allow_stale_reads,
        max_request_bytes=args.max_request_bytes,
        max_streams=args.max_streams,
        stream_idle_timeout=args.stream_idle_timeout,
    )
    return serve(config)


def _processor_run(args: argparse.Namespace) -> int:
    from prometheus_client import start_http_server

    from goka.graph import load_graph
    from goka.partition_table import ORIGINS
    from goka.spark import Processor

    processor = Processor(
        load_graph(args.graph),
        _brokers(args.brokers),
        master=args.master,
        state_dir=args.state_dir,
        checkpoint_dir=args.checkpoint_dir,
        mode=args.mode,
        trigger=args.trigger,
        epoch=args.epoch,
        commit_interval=args.commit_interval,
        on_error=args.on_error,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        starting_offsets=args.starting_offsets,
        snapshot_interval=args.snapshot_interval,
        snapshot_dir=args.snapshot_dir,
        snapshots_kept=args.snapshots_kept,
        broker_timeout=args.broker_timeout,
    )
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: processor.stop())
    if args.metrics_port is not None:
        start_http_server(args.metrics_port)
    if args.until_caught_up:
        batches = processor.run_until_caught_up()
        processed = sum(b.processed for b in batches)
        failed = sum(b.failed for b in batches)
        dead = sum(b.dead_letters for b in batches)
        stores = sum((b.stores for b in batches), Counter[str]())
        listing = ", ".join(f"{stores[o]} {o}" for o in ORIGINS)
        outcome = {"fail": "", "skip": f" ({failed} skipped)",
                   "dead_letter": f" ({dead} dead-lettered)"}[args.on_error]  # fmt: skip
        print(f"caught up: {processed} messages{outcome} in {len(batches)} batches; "
              f"stores: {listing}", flush=True)  # fmt: skip
    else:
        processor.run()
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the ``goka`` command."""
    parser = argparse.ArgumentParser(prog="goka", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    broker = commands.add_parser(
        "broker", help="run an embedded Kafka-protocol broker (development only) in the foreground"
    )
    broker.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    broker.set_defaults(run=_broker)

    view = commands.add_parser("view", help="views of table topics").add_subparsers(
        dest="view_command", required=True
    )
    serve = view.add_parser("serve", help="serve tables over gRPC until SIGTERM")
    serve.add_argument("--table", action="append", required=True, help="table topic (repeatable)")
    serve.add_argument("--codec", action="append", help="codec: bytes|string|int64|json")
    serve.add_argument("--brokers", help="bootstrap servers (default: $GOKA_BROKERS)")
    serve.add_argument("--path", help="directory for the LevelDB storage (default: memory)")
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on")
    serve.add_argument("--port", type=int, default=50051, help="gRPC port (0: any free port)")
    serve.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port")
    serve.add_argument("--tls-cert", help="PEM certificate chain (enables TLS)")
    serve.add_argument("--tls-key", help="PEM private key")
    serve.add_argument(
        "--tls-client-ca", help="PEM CA of client certificates: serve only clients it signed"
    )
    serve.add_argument(
        "--max-streams",
        type=int,
        default=16,
        help="most scans at once, more are refused (default: %(default)s)",
    )
    serve.add_argument("--stream-idle-timeout", type=float, default=10.0,
                       help="cancel a scan whose client reads nothing for this many seconds "
                       "(default: %(default)s)")  # fmt: skip
    serve.add_argument("--max-request-bytes", type=int, default=1 << 20)
    serve.add_argument("--allow-stale-reads", action="store_true", help="serve before recovery")
    serve.set_defaults(run=_view_serve)

    processor = commands.add_parser("processor", help="processor groups on Spark")
    run = processor.add_subparsers(dest="processor_command", required=True).add_parser(
        "run", help="run a group graph as a Spark Structured Streaming job"
    )
    run.add_argument("graph", help="the group graph as module:attribute")
    run.add_argument("--brokers", help="bootstrap servers (default: $GOKA_BROKERS)")
    run.add_argument("--master", help="Spark master (local[2], spark://host:7077; default local)")
    run.add_argument("--state-dir", help="partition stores (default: ./goka-state/<group>)")
    run.add_argument("--checkpoint-dir", help="Spark checkpoint (default: <state-dir>/checkpoint)")
    run.add_argument(
        "--mode",
        default="continuous",
        choices=["micro-batch", "continuous", "available-now"],
        help="continuous (default): epochs in which tasks process records as they arrive "
        "(tens of milliseconds from emit to table); micro-batch: a batch every --trigger "
        "(about a second); available-now: what is there, then exit",
    )
    run.add_argument("--trigger", default="1 second", help="micro-batch interval")
    run.add_argument(
        "--epoch", type=float, default=30.0, help="seconds per epoch in continuous mode"
    )
    run.add_argument(
        "--commit-interval",
        type=float,
        default=0.1,
        help="seconds between commits in continuous mode (default 0.1)",
    )
    run.add_argument("--on-error", default="fail", choices=["fail", "skip", "dead_letter"])
    run.add_argument("--broker-timeout", type=float, default=30.0,
                     help="seconds a read may get nothing before the batch fails, naming the "
                     "brokers (default: %(default)s)")  # fmt: skip
    run.add_argument("--max-offsets-per-trigger", type=int)
    run.add_argument(
        "--starting-offsets",
        default="earliest",
        help="where a new checkpoint starts: earliest, latest, group (the consumer group's "
        'committed offsets, e.g. Go Goka\'s) or JSON {"topic": {"0": 42}} (default: earliest)',
    )
    run.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port")
    run.add_argument(
        "--snapshot-interval",
        type=float,
        default=30.0,
        help="seconds between snapshots of each partition's state (0: none; default 30)",
    )
    run.add_argument(
        "--snapshot-dir",
        help="where snapshots go: path or URL, s3://, gs://, hdfs:// (default: "
        "<checkpoint-dir>/state)",
    )
    run.add_argument(
        "--snapshots-kept", type=int, default=3, help="snapshots kept per partition (default 3)"
    )
    run.add_argument(
        "--until-caught-up",
        action="store_true",
        help="process what is there now, then exit (Trigger.AvailableNow)",
    )
    run.set_defaults(run=_processor_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``goka`` command; return its exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("GOKA_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
