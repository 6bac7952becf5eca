"""Flags with environment-variable defaults and help that shows both, for every subcommand."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from goka.errors import UsageError

__all__ = ["add", "add_brokers", "add_http", "brokers", "env_name"]


def env_name(flag: str) -> str:
    """``--http-port`` -> ``GOKA_HTTP_PORT``."""
    return "GOKA_" + flag.lstrip("-").replace("-", "_").upper()


def add(
    parser: argparse.ArgumentParser,
    flag: str,
    help: str,
    *,
    default: Any = None,
    type: Callable[[str], Any] = str,
    env: bool = True,
    **kwargs: Any,
) -> None:
    """Add ``flag`` whose default comes from ``$GOKA_<FLAG>`` (when ``env``), else ``default``;
    the help text ends with both."""
    name = env_name(flag)
    from_env = os.environ.get(name) if env else None
    value = default
    if from_env is not None:
        try:
            value = type(from_env)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"${name}={from_env!r}: {exc}") from exc
    shown = f"default: {default}" if default is not None and default != "" else "no default"
    suffix = f" ({shown}; env {name})" if env else f" ({shown})"
    parser.add_argument(flag, default=value, type=type, help=help + suffix, **kwargs)


def add_brokers(parser: argparse.ArgumentParser) -> None:
    add(parser, "--brokers", "Kafka bootstrap servers, host:port[,host:port...]")


def brokers(args: argparse.Namespace) -> str:
    """The brokers given, or a usage error that says how to give them."""
    if not args.brokers:
        raise UsageError("no Kafka brokers: pass --brokers host:port[,...] or set GOKA_BROKERS")
    return str(args.brokers)


def add_http(parser: argparse.ArgumentParser, port: int) -> None:
    add(parser, "--http-host", "address of the HTTP port (/metrics, /healthz, /readyz)",
        default="127.0.0.1")  # fmt: skip
    add(parser, "--http-port", "HTTP port (0: any free port, printed at start)",
        default=port, type=int)  # fmt: skip
