"""``goka s3``: an S3 API server for development in the foreground (S3Proxy, files on disk)."""

from __future__ import annotations

import argparse
import shlex
import threading
from pathlib import Path

from goka.commands.options import add, port, serve

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "s3", help="run an S3 API server for development (S3Proxy) in the foreground",
        description="Run an S3 API server on 127.0.0.1 until Ctrl-C or SIGTERM (S3Proxy on its "
        "filesystem backend; needs Java 17, its jars are fetched with Maven the first time), "
        "with the buckets --bucket names made, and print the AWS variables that point goka-py "
        "(and any AWS SDK) at it. Its objects are deleted when it stops unless --data-dir is "
        "given. With --fetch, only fetch S3Proxy's jars and print where they are.",
    )  # fmt: skip
    add(parser, "--port", "TCP port (0: a free one)", default=0, type=port,
        env="GOKA_S3_PORT")  # fmt: skip
    add(parser, "--data-dir", "where its buckets are folders (kept)", default=None)
    parser.add_argument("--bucket", action="append", default=[],
                        help="a bucket to make (repeatable; default: none)")  # fmt: skip
    parser.add_argument("--fetch", action="store_true",
                        help="fetch S3Proxy's jars, print their folder, exit")  # fmt: skip
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.dev.s3 import LocalS3, s3proxy_libs

    if args.fetch:
        print(s3proxy_libs(), flush=True)
        return 0
    data = Path(args.data_dir) if args.data_dir else None
    with LocalS3(port=args.port or None, data_dir=data) as server:
        made = [b for b in args.bucket if server.make_bucket(b)]
        print(f"S3 API server listening at {server.endpoint}; buckets made: "
              f"{', '.join(made) or 'none'}; in a shell:", flush=True)  # fmt: skip
        for name, value in server.env.items():
            print(f"export {name}={shlex.quote(value)}", flush=True)
        return serve(stop, lambda: server.running, server.log_tail, "S3 server")
