"""Flags with environment-variable defaults and help that shows both, for every subcommand."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn

from goka.errors import ConfigurationError, UsageError

__all__ = ["HTTP_PORTS", "Parser", "add", "add_brokers", "add_http", "as_flags", "at_least",
           "brokers", "env_name", "port", "said_with_flags", "seconds", "serve",
           "setting_flags"]  # fmt: skip


#: The HTTP port of each command's service by default: fixed (a restarted service keeps its
#: address, and Prometheus its ``instance`` label), outside the range 9100-9999 that
#: Prometheus allocates to exporters (9100 is the node exporter's, 9101 HAProxy's), and away
#: from Kafka's and Spark's ports (9092, 8080-8083, 4040, 7077).
HTTP_PORTS = {"processor": 8470, "view": 8471, "connect": 8472}


class Parser(argparse.ArgumentParser):
    """A parser whose errors are one line, as every error of the command is: what is wrong,
    and where the usage is (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"goka: error: {message} ({self.prog} --help shows the usage)\n")


def as_flags(message: str, flags: Mapping[str, str]) -> str:
    """``message`` (a :class:`~goka.errors.ConfigurationError`'s) with each keyword of
    ``flags`` it names as that flag: ``need 0 <= commit_interval < epoch`` becomes ``need 0 <=
    --commit-interval < --epoch`` (a word without ``_`` only where it stands for the setting,
    before ``=``, ``must``, a comparison or a comma)."""
    for name in sorted(flags, key=len, reverse=True):
        after = "" if "_" in name else r"(?=\s*(?:=|must\b|<|>|,|\)|$))"
        message = re.sub(rf"(?<![\w-]){re.escape(name)}\b{after}", flags[name], message)
    return message


@contextlib.contextmanager
def said_with_flags(flags: Mapping[str, str]) -> Iterator[None]:
    """Turn a :class:`~goka.errors.ConfigurationError` raised inside into a
    :class:`~goka.errors.UsageError` that names the flags the user gave (:func:`as_flags`)."""
    try:
        yield
    except UsageError:
        raise
    except ConfigurationError as exc:
        raise UsageError(as_flags(str(exc), flags)) from exc


def setting_flags(names: Iterable[str]) -> dict[str, str]:
    """Each setting's flag: ``commit_interval`` -> ``--commit-interval``."""
    return {name: "--" + name.replace("_", "-") for name in names}


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    number = _integer(text, "a port")
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give 0-65535 (0: any free "
                                         f"one)")  # fmt: skip
    return number


def at_least(least: int) -> Callable[[str], int]:
    """An integer of at least ``least``."""

    def parse(text: str) -> int:
        number = _integer(text, f"an integer >= {least}")
        if number < least:
            raise argparse.ArgumentTypeError(f"{text!r}: give an integer >= {least}")
        return number

    parse.__name__ = f"integer >= {least}"
    return parse


def seconds(text: str) -> float:
    """A number of seconds, at least 0."""
    try:
        number = float(text)
    except ValueError:
        number = -1.0
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds >= 0")
    return number


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


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
    env: bool | str = True,
    shown: str | None = None,
    was: str | None = None,
    **kwargs: Any,
) -> None:
    """Add ``flag`` whose default comes from ``$GOKA_<FLAG>`` (when ``env``; a string: that
    variable; ``was``: the variable's earlier name, still read, with a warning), else
    ``default``; the help text ends with both (``shown``: what the default is, where it is
    not a value)."""
    name = env if isinstance(env, str) else env_name(flag)
    from_env = os.environ.get(name) if env else None
    if from_env is None and was is not None and os.environ.get(was) is not None:
        from_env = os.environ[was]  # (said once this command runs: see goka.cli.main)
        said = [*(parser.get_default("_said") or []), f"${was} is ${name} now (one name per "
                f"setting); ${was} will be ignored in a later release"]  # fmt: skip
        parser.set_defaults(_said=said)
    value = default
    if from_env is not None:
        try:
            value = type(from_env)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise UsageError(f"${name}={from_env!r}: {exc}") from exc
    if shown is None:
        shown = str(default) if default is not None and default != "" else ""
    shown = f"default: {shown}" if shown else "no default"
    suffix = f" ({shown}; env {name})" if env else f" ({shown})"
    parser.add_argument(flag, default=value, type=type, help=help + suffix, **kwargs)


def add_brokers(parser: argparse.ArgumentParser) -> None:
    add(parser, "--brokers", "Kafka bootstrap servers, host:port[,host:port...]")


def brokers(args: argparse.Namespace) -> str:
    """The brokers given, or a usage error that says how to give them."""
    if not args.brokers:
        raise UsageError("no Kafka brokers: pass --brokers host:port[,...] or set GOKA_BROKERS")
    return str(args.brokers)


def add_http(parser: argparse.ArgumentParser, number: int) -> None:
    add(parser, "--http-host", "address of the HTTP port (/metrics, /healthz, /readyz)",
        default="127.0.0.1")  # fmt: skip
    add(parser, "--http-port", "HTTP port (0: any free port, printed at start)",
        default=number, type=port)  # fmt: skip


def serve(stop: threading.Event, running: Callable[[], bool], tail: Callable[[], str],
          what: str) -> int:  # fmt: skip
    """Wait until ``stop`` (Ctrl-C, SIGTERM): 0; or until ``what`` is no longer ``running``:
    1, its log's ``tail`` printed."""
    while not stop.wait(0.5):
        if not running():
            print(f"goka: error: the {what} exited:\n{tail()}", flush=True)
            return 1
    return 0
