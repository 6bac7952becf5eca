"""The ``goka`` command line."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

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


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the ``goka`` command."""
    parser = argparse.ArgumentParser(prog="goka", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    broker = commands.add_parser(
        "broker", help="run an embedded Kafka-protocol broker (development only) in the foreground"
    )
    broker.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    broker.set_defaults(run=_broker)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``goka`` command; return its exit code."""
    args = build_parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
