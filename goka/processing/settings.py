"""Every setting of a processor, declared once: its default, its description, how it is
checked and whether the command line offers it.

:class:`ProcessorSettings` is the one declaration. The driver's configuration
(:class:`goka.spark.config.ProcessorConfig`) and the tasks' (:class:`~goka.processing.config.
TaskConfig`) are made of it, :class:`goka.spark.Processor` takes its fields as keyword
arguments, ``goka processor run`` makes its flags from it (:func:`cli_settings`), and the
documentation's settings table is written from it (``python -m tools.gen_docs``). Adding a
setting is a field here and the code that reads it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from goka.errors import ConfigurationError
from goka.group.edges import spelled
from goka.group.engine import POLICIES, ErrorPolicy
from goka.kafka.config import check_settings, scoped
from goka.processing.values import LOG_LEVELS, TRIGGER, json_options, merged, trigger_seconds
from goka.time.window_cache import WINDOW_CACHE

if TYPE_CHECKING:  # imported when first built: the command line declares its flags from here
    from goka.processing.builders import Builders
    from goka.topic_manager import TopicManagerConfig

__all__ = [
    "FIRE_BUDGET",
    "GUARANTEES",
    "MODES",
    "ProcessorSettings",
    "Setting",
    "cli_settings",
    "settings",
]

#: How a processor runs (see :class:`goka.spark.Processor`).
MODES = ("micro-batch", "continuous", "available-now")
#: What a processor promises of its outputs after a crash (docs/processors.md, "Guarantees").
GUARANTEES = ("at-least-once", "exactly-once")

#: The most timers and expiries a partition fires between two commits, by default (see
#: :class:`goka.group.engine.Engine`'s ``fire_budget``): a stream time jump over a million
#: timers commits in slices instead of holding every effect in memory.
FIRE_BUDGET = 10_000
#: A partition's records read and not done with, at most (``in_flight_bytes``: 64 MiB, some
#: 50,000 small records: a busy key's records may wait this long behind it).
IN_FLIGHT_BYTES = 64 << 20


@dataclass(frozen=True)
class Setting:
    """What is declared of a setting beside its default: its description, and, if the command
    line offers it, the type its flag parses and the values it may take."""

    name: str
    default: Any
    description: str
    flag: Callable[[str], Any] | None
    choices: tuple[str, ...] | None


def _setting(default: Any, description: str, *, flag: Callable[[str], Any] | None = None,
             choices: tuple[str, ...] | None = None, factory: Callable[[], Any] | None = None,
             ) -> Any:  # fmt: skip
    metadata = {"description": " ".join(description.split()), "flag": flag, "choices": choices}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _topics() -> TopicManagerConfig:
    from goka.topic_manager import TopicManagerConfig

    return TopicManagerConfig()


def _builders() -> Builders:
    from goka.processing.builders import Builders

    return Builders()


@dataclass(frozen=True, kw_only=True)
class ProcessorSettings:
    """How a processor runs: each field is a setting, described where it is declared (see
    :func:`settings` or the documentation's settings table). Checked when built: invalid
    settings fail at declaration, not mid-stream.

    Raises:
        ConfigurationError: an invalid setting.
    """

    mode: str = _setting("continuous", """``continuous`` (the default of both the library
        and ``goka processor run``): each micro-batch is an *epoch* of ``epoch`` seconds in
        which every task processes its partitions as records arrive and commits every
        ``commit_interval`` (milliseconds from emit to table, as Kafka Streams and Go Goka);
        ``micro-batch``: each micro-batch processes the records that arrived since the previous
        one, every ``trigger`` (about a second from emit to table); ``available-now``: what is
        there, then stop.""", choices=MODES)  # fmt: skip
    trigger: str = _setting(TRIGGER, """The micro-batch interval: ``<number> <unit>``, units
        milliseconds, seconds, minutes, hours or days (``"500 milliseconds"``, ``"1 minute 30
        seconds"``; ``available-now``: as the mode). Micro-batches only: continuous epochs run
        back to back (see ``epoch`` and ``commit_interval``).""", flag=str)  # fmt: skip
    epoch: float = _setting(
        30.0,
        """Seconds of each epoch in continuous mode (between them,
        Spark plans the next one: a pause of a few hundred milliseconds).""",
        flag=float,
    )
    commit_interval: float = _setting(
        0.1,
        """Seconds between a task's commits in continuous
        mode (0: after every poll; a crash under at-least-once repeats the outputs since the
        last write of the state: ``write_interval``). Under
        exactly-once, where a record is visible once its commit is, a commit begins early by
        the longest of the last 20 commits' waits (at most half of this): a record is visible
        about this long after it was processed.""",
        flag=float,
    )
    write_interval: float = _setting(
        1.0,
        """Seconds between the writes of a partition's state to its store in continuous
        mode: the commits in between (their outputs acknowledged) are written together, each
        changed key once with its last value (0: each commit once acknowledged, as a group
        with windows or timers always does). A crash under at-least-once produces again at
        most this much of the outputs; under exactly-once the store catches up from the
        committed changelog.""",
        flag=float,
    )
    epoch_tasks: int | None = _setting(
        None,
        """Tasks per epoch in continuous mode, each
        running some partitions (an epoch's tasks must all run at once; default: the job's
        task slots, or one per partition if there are fewer partitions).""",
        flag=int,
    )
    guarantee: str = _setting("at-least-once", """``at-least-once``: state stays exact after a
        crash, and the outputs of the records since the last commit are produced again;
        ``exactly-once``: each commit is one Kafka transaction holding the outputs, the
        changelog rows and the group's offsets, which ``read_committed`` readers read all at
        once or never, and a second writer of a partition is fenced (a broker that hides
        aborted transactions, as Apache Kafka).""", flag=str,
        choices=GUARANTEES)  # fmt: skip
    tick_interval: float | None = _setting(None, """Seconds between the ticks of a group with
        wall-clock timers or TTL: how late a wall timer may fire on a partition that gets no
        records (default: 0.1 in continuous mode, the trigger interval in
        micro-batches).""", flag=float)  # fmt: skip
    on_error: ErrorPolicy = _setting(
        "fail",
        """What a record that cannot be decoded or whose
        callback raises does: ``fail`` stops the group, ``skip`` counts and logs it,
        ``dead-letter`` also writes it to ``<group>-dlq``.""",
        flag=str,
        choices=POLICIES,
    )
    fire_budget: int = _setting(FIRE_BUDGET, """The most timers and expiries a partition fires
        between two commits (a record that makes more due commits in slices: memory stays
        bounded).""", flag=int)  # fmt: skip
    in_flight_bytes: int = _setting(IN_FLIGHT_BYTES, """The most a partition's records read and
        not done with may hold in continuous mode, in a group with records in flight
        (``concurrency``, async callbacks, ``retry`` or ``timeout``) that keeps no time: their
        keys' and values' bytes plus 1 KiB each (their contexts and effects). A busy key's
        records wait while the records after it run on, their effects kept until it is done
        (released in offset order); once a partition reaches this, its task stops reading
        (for its other partitions too) until the partition is below it again.""",
        flag=int)  # fmt: skip
    window_cache: int = _setting(WINDOW_CACHE, """How many windows of each window table (of
        fixed windows) a partition keeps in memory with their values until they close, to
        read them without its store (about 200 bytes each with short keys and values; 0:
        none).""", flag=int)  # fmt: skip
    max_offsets_per_trigger: int | None = _setting(
        None,
        """The most input records per
        micro-batch (default: all there are).""",
        flag=int,
    )
    starting_offsets: str = _setting("earliest", """Where a new checkpoint starts:
        ``earliest``, ``latest``, JSON ``{"topic": {"0": 42}}``, or ``group``: the offsets
        committed to the consumer group ``<group>`` (by Go Goka, or an earlier run with
        another checkpoint; ``earliest`` where none). In every mode, tasks begin at least
        where the group committed, as Go Goka does (to process input again, reset the
        group's offsets or name a new group).""", flag=str)  # fmt: skip
    state_dir: str = _setting("goka-state", """Where tasks keep partition stores,
        ``<state_dir>/<group>/partition-N``; a relative path is taken in each executor's
        working directory (its local disk).""")  # fmt: skip
    checkpoint_dir: str = _setting("", """Spark's checkpoint (shared storage on a cluster;
        default: ``<state_dir>/<group>/checkpoint``).""")  # fmt: skip
    snapshot_interval: float = _setting(
        30.0,
        """Seconds between snapshots of each
        partition's stores (0: none): a partition that moves to another executor restores
        its newest snapshot and replays only the table records written since.""",
        flag=float,
    )
    snapshot_dir: str = _setting("", """Where snapshots go: a path or fsspec URL (``s3://``,
        ``gs://``, ``hdfs://``; shared by all executors; default:
        ``<checkpoint_dir>/state``).""", flag=str)  # fmt: skip
    snapshots_kept: int = _setting(3, "Snapshots kept per partition.", flag=int)
    storage_options: Mapping[str, Any] = _setting(None, """fsspec (s3fs) options of every URL
        location: ``snapshot_dir``, the stop signal and board by ``checkpoint_dir``; JSON on
        the command line.""", factory=dict, flag=json_options)  # fmt: skip
    snapshot_options: Mapping[str, Any] = _setting(None, """fsspec storage options for
        ``snapshot_dir`` only (they win over ``storage_options``).""", factory=dict)  # fmt: skip
    kafka_config: Mapping[str, Any] = _setting(None, """librdkafka settings for every
        client; a key prefixed ``consumer.``, ``producer.`` or ``admin.`` goes to those
        clients only, without its prefix (``consumer.fetch.wait.max.ms``), as Kafka Streams'
        prefixes do.""", factory=dict)  # fmt: skip
    producer_config: Mapping[str, Any] = _setting(None, """librdkafka settings for the tasks'
        producer only (acks, compression).""", factory=dict)  # fmt: skip
    topics: TopicManagerConfig = _setting(None, """Creation settings of the group table,
        loop and dead-letter topics.""", factory=_topics)  # fmt: skip
    builders: Builders = _setting(None, """Where partition processors get their storage,
        producer, reader, snapshot store and lookup tables (tests swap them).""",
        factory=_builders)  # fmt: skip
    progress_interval: float = _setting(5.0, """In continuous mode, seconds between updates
        of the lag, committed offsets and commit times from the group's commits while an
        epoch runs.""", flag=float)  # fmt: skip
    broker_timeout: float = _setting(30.0, """Seconds a task's read may get nothing before it
        fails the batch (naming the brokers if they could not be reached); a read that
        progresses goes on however long it takes.""", flag=float)  # fmt: skip
    log_level: str | None = _setting(None, """How the Python workers that run the tasks log:
        DEBUG, INFO, WARNING, ERROR or CRITICAL (None: they configure nothing).""")  # fmt: skip
    log_format: str = _setting("text", "The log format of those workers: text or json.")

    def __post_init__(self) -> None:
        self._set(state_dir=str(self.state_dir or "goka-state"),
                  checkpoint_dir=str(self.checkpoint_dir or ""),
                  snapshot_dir=str(self.snapshot_dir or ""))  # fmt: skip
        if self.trigger == "available-now":
            self._set(mode="available-now")
        self._set(on_error=spelled(self.on_error, "on_error"))
        if isinstance(self.log_level, str):  # ("info", "WARN" as the logging module takes them)
            level = self.log_level.upper()
            self._set(log_level="WARNING" if level == "WARN" else level)
        _check(self)
        self._set(snapshot_options=merged(self.storage_options, self.snapshot_options))

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def values(self) -> dict[str, Any]:
        """The value of every setting, by name."""
        return {s.name: getattr(self, s.name) for s in settings()}


def settings() -> list[Setting]:
    """Every processor setting, in declaration order."""
    return [Setting(f.name, _default(f), f.metadata["description"], f.metadata["flag"],
                    f.metadata["choices"])
            for f in dataclasses.fields(ProcessorSettings)]  # fmt: skip


def cli_settings() -> list[Setting]:
    """The settings ``goka processor run`` offers as flags."""
    return [s for s in settings() if s.flag is not None]


def _default(found: dataclasses.Field[Any]) -> Any:
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    return found.default


#: The settings given in seconds (``tick_interval`` may also be None).
SECONDS = ("epoch", "commit_interval", "write_interval", "tick_interval", "snapshot_interval",
           "progress_interval", "broker_timeout")  # fmt: skip


def _check_types(s: ProcessorSettings) -> None:
    """Raise for a setting of the wrong type (``tick_interval="1s"``) before any comparison
    would fail with a TypeError."""
    for name in SECONDS:
        value = getattr(s, name)
        if value is None and name == "tick_interval":
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ConfigurationError(f"{name} must be a number of seconds, got {value!r}")
    for name in ("kafka_config", "producer_config", "snapshot_options", "storage_options"):
        if not isinstance(getattr(s, name), Mapping):
            raise ConfigurationError(f"{name} must be a mapping of settings, got "
                                     f"{getattr(s, name)!r}")  # fmt: skip
    for name in ("trigger", "starting_offsets", "log_format"):
        if not isinstance(getattr(s, name), str):
            raise ConfigurationError(f"{name} must be a string, got {getattr(s, name)!r}")


def _check(s: ProcessorSettings) -> None:
    """Raise ConfigurationError for the first invalid setting of ``s``."""
    _check_types(s)
    if s.on_error not in POLICIES:
        raise ConfigurationError(f"on_error must be one of {POLICIES}, got {s.on_error!r}")
    if s.mode not in MODES:
        raise ConfigurationError(f"mode must be one of {MODES}, got {s.mode!r}")
    if s.guarantee not in GUARANTEES:
        raise ConfigurationError(f"guarantee must be one of {GUARANTEES}, got {s.guarantee!r}")
    for name, least in (("fire_budget", 1), ("window_cache", 0), ("snapshots_kept", 1),
                        ("in_flight_bytes", 1)):  # fmt: skip
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigurationError(f"{name} must be an int >= {least}, got {value!r}")
    for name in ("max_offsets_per_trigger", "epoch_tasks"):
        value = getattr(s, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):  # fmt: skip
            raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")
    for name in ("progress_interval", "broker_timeout", "epoch"):
        if getattr(s, name) <= 0:
            raise ConfigurationError(f"{name} must be > 0, got {getattr(s, name)}")
    if s.tick_interval is not None and s.tick_interval <= 0:
        raise ConfigurationError(f"tick_interval must be > 0, got {s.tick_interval}")
    if s.write_interval < 0:
        raise ConfigurationError(f"write_interval must be >= 0, got {s.write_interval}")
    if not 0 <= s.commit_interval < s.epoch:
        raise ConfigurationError(f"need 0 <= commit_interval < epoch, got commit_interval="
                                 f"{s.commit_interval}, epoch={s.epoch}")  # fmt: skip
    if s.snapshot_interval < 0:
        raise ConfigurationError(f"snapshot_interval must be >= 0, got {s.snapshot_interval}")
    if s.log_format not in ("text", "json"):
        raise ConfigurationError(f"log_format must be text or json, got {s.log_format!r}")
    if s.log_level is not None and s.log_level not in LOG_LEVELS:
        raise ConfigurationError(f"log_level must be one of {', '.join(LOG_LEVELS)} (or None), "
                                 f"got {s.log_level!r}")  # fmt: skip
    if s.mode != "available-now":
        trigger_seconds(s.trigger)
    if s.mode == "continuous" and s.trigger != TRIGGER:
        raise ConfigurationError(
            f"trigger={s.trigger!r} applies to micro-batches: in continuous mode epochs run "
            f"back to back and commit every commit_interval; remove the trigger, or use "
            f"mode='micro-batch'"
        )
    # (the producer's settings as a task's producer gets them: kafka_config's, then these)
    producing = {f"producer.{k}": v for k, v in s.producer_config.items()}
    where = "kafka_config / producer_config" if producing else "kafka_config"
    check_settings({**s.kafka_config, **producing}, where)
    _check_starting_offsets(s.starting_offsets)
    if s.guarantee == "exactly-once":
        _check_exactly_once(s)


#: Under exactly-once, the longest commit interval: a quarter of the transactions' timeout
#: (``goka.kafka.transactions.TRANSACTION_TIMEOUT_MS``, 60 s), after which the broker aborts
#: a transaction and fences its writer.
MOST_EXACTLY_ONCE_COMMIT_INTERVAL = 15.0


def _check_exactly_once(s: ProcessorSettings) -> None:
    """Raise for settings that exactly-once cannot keep its promise with: a reader that
    would apply aborted changelog rows, a producer that is not its own partition's
    transactional one, commits further apart than a transaction may stay open."""
    consumer, producer = scoped(s.kafka_config, "consumer."), {
        **scoped(s.kafka_config, "producer."), **s.producer_config}  # fmt: skip
    level = str(consumer.get("isolation.level", "read_committed"))
    if level != "read_committed":
        raise ConfigurationError(
            f"guarantee='exactly-once' reads committed records only, but kafka_config sets "
            f"isolation.level={level!r}: a task would apply the changelog rows of aborted "
            f"transactions to its store; remove the setting"
        )
    if "transactional.id" in producer:
        raise ConfigurationError(
            "guarantee='exactly-once' gives each group partition a transactional id of its "
            "own (<group>-<partition>): remove transactional.id from the producer's settings"
        )
    if str(producer.get("enable.idempotence", True)).lower() in ("false", "0"):
        raise ConfigurationError("guarantee='exactly-once' needs an idempotent producer: "
                                 "remove enable.idempotence=false")  # fmt: skip
    if s.commit_interval > MOST_EXACTLY_ONCE_COMMIT_INTERVAL:
        raise ConfigurationError(
            f"under guarantee='exactly-once' commit_interval must be at most "
            f"{MOST_EXACTLY_ONCE_COMMIT_INTERVAL:g} s (a transaction open for 60 s is aborted "
            f"by the broker), got {s.commit_interval:g}"
        )


def _check_starting_offsets(starting: str) -> None:
    if starting in ("earliest", "latest", "group"):
        return
    try:
        given = json.loads(starting)
        valid = isinstance(given, dict) and all(
            isinstance(p, dict) and all(int(o) >= 0 for o in p.values()) for p in given.values()
        )
    except (ValueError, TypeError):
        valid = False
    if not valid:
        raise ConfigurationError(
            "starting_offsets must be earliest, latest, group or JSON like "
            f'{{"topic": {{"0": 42}}}}, got {starting!r}'
        )
