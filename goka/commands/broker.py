"""``goka broker``: an embedded Kafka-protocol broker in the foreground (development only)."""

from __future__ import annotations

import argparse
import threading

from goka.commands.options import add

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "broker", help="run an embedded Kafka-protocol broker (development only) in the foreground",
        description="Run the embedded broker (Tansu, from the goka-py[broker] extra) on "
        "127.0.0.1 until Ctrl-C or SIGTERM. It keeps everything in memory.",
    )  # fmt: skip
    add(parser, "--port", "TCP port (0: a free one)", default=0, type=int)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.dev import EmbeddedBroker

    with EmbeddedBroker(port=args.port or None) as broker:
        print(f"embedded Kafka broker listening; bootstrap servers: {broker.bootstrap}", flush=True)
        while not stop.wait(0.5):
            if not broker.running:
                print(f"goka: error: the broker exited:\n{broker.log_tail()}", flush=True)
                return 1
    return 0
