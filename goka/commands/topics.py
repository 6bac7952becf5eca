"""``goka topics create|list|describe``: the topics a group needs, from the command line."""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from goka.commands.options import add, add_brokers, brokers, seconds
from goka.errors import UsageError

if TYPE_CHECKING:
    from goka.kafka import KafkaAdmin
    from goka.kafka.config import Brokers

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = commands.add_parser("topics", help="create, list and describe topics")
    sub = topics.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")
    create = sub.add_parser("create", help="create stream or table topics (existing ones are "
                            "checked, not changed)")  # fmt: skip
    create.add_argument("names", nargs="+", metavar="TOPIC", help="topic names")
    add(create, "--partitions", "partition count", default=10, type=int, env=False)
    create.add_argument("--table", action="store_true",
                        help="create compacted table topics (default: streams)")  # fmt: skip
    add(
        create,
        "--replication",
        "replication factor; unless given, the cluster's default",
        type=int,
        env=False,
    )
    listing = sub.add_parser("list", help="list topics with their partition counts")
    listing.add_argument("--json", action="store_true", help="print JSON")
    describe = sub.add_parser("describe", help="partitions and settings of topics")
    describe.add_argument("names", nargs="+", metavar="TOPIC", help="topic names")
    for parser in (create, listing, describe):
        add_brokers(parser)
        add(parser, "--timeout", "seconds to wait for the brokers", default=10.0, type=seconds)
    create.set_defaults(run=_create)
    listing.set_defaults(run=_list)
    describe.set_defaults(run=_describe)


def _create(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.topic_manager import TopicManager, TopicManagerConfig

    if args.partitions < 1:
        raise UsageError(f"--partitions must be at least 1, got {args.partitions}")
    config = TopicManagerConfig(partitions=args.partitions, replication=args.replication)
    manager = TopicManager(brokers(args), config, admin_builder=_admin(args))
    for name in args.names:
        ensure = manager.ensure_table_exists if args.table else manager.ensure_stream_exists
        existed = manager.exists(name)
        count = ensure(name, args.partitions)
        kind = "table" if args.table else "stream"
        print(f"{name}: {kind}, {count} partitions{' (existed)' if existed else ''}")
    return 0


def _admin(args: argparse.Namespace) -> Callable[[Brokers, Mapping[str, Any]], KafkaAdmin]:
    from goka.kafka import KafkaAdmin

    return lambda brokers, config: KafkaAdmin(brokers, config, timeout=args.timeout)


def _list(args: argparse.Namespace, stop: threading.Event) -> int:
    topics = _admin(args)(brokers(args), {}).topics()
    if args.json:
        print(json.dumps(topics, sort_keys=True))
    else:
        for name, partitions in sorted(topics.items()):
            print(f"{name}\t{partitions}")
    return 0


def _describe(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.errors import TopicError

    admin = _admin(args)(brokers(args), {})
    known = admin.topics()
    missing = [n for n in args.names if n not in known]
    if missing:
        raise TopicError(f"no such topics: {', '.join(missing)} (goka topics list shows them)")
    for name in args.names:
        settings = admin.topic_config(name)
        print(json.dumps({"topic": name, "partitions": known[name], "config": settings}))
    return 0
