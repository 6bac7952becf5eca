"""How a processor runs: :class:`ProcessorConfig`, validated when built (invalid settings fail
at declaration, not mid-stream), and the :class:`~goka.processing.config.TaskConfig` its tasks
are given."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goka.errors import ConfigurationError
from goka.group.engine import POLICIES, ErrorPolicy
from goka.group.graph import GroupGraph
from goka.kafka.config import bootstrap_servers
from goka.processing.config import FIRE_BUDGET, Builders, TaskConfig
from goka.spark.session import SessionSettings
from goka.time.window_cache import WINDOW_CACHE
from goka.topic_manager import TopicManagerConfig

__all__ = ["MODES", "ProcessorConfig"]

#: How a processor runs (see :class:`goka.spark.Processor`).
MODES = ("micro-batch", "continuous", "available-now")


@dataclass(frozen=True)
class ProcessorConfig:
    """Every setting of a processor (:class:`goka.spark.Processor` takes them as keyword
    arguments), checked when built: invalid settings fail at declaration, not mid-stream.

    Attributes:
        graph: the group to run.
        brokers: bootstrap servers.
        checkpoint_dir: Spark's checkpoint (shared storage on a cluster).
        state_dir: where tasks keep partition stores, ``<state_dir>/<group>/partition-N``; a
            relative path is taken in each executor's working directory (its local disk).
        mode: ``micro-batch`` (default): each micro-batch processes the records that arrived
            since the previous one, every ``trigger``; ``continuous``: each micro-batch is an
            *epoch* of ``epoch`` seconds in which every task processes its partition as
            records arrive and commits every ``commit_interval`` (latency in milliseconds
            instead of about a second); ``available-now``: what is there, then stop.
        trigger: the micro-batch interval, ``"1 second"`` (``"available-now"``: as the mode).
        tick_interval: seconds between the ticks of a group with wall-clock timers or TTL
            (:attr:`GroupGraph.ticking <goka.group.graph.GroupGraph.ticking>`): how late a wall
            timer may fire on a partition that gets no records (default: 0.1 in continuous
            mode, the trigger interval in micro-batches).
        epoch: seconds of each epoch in continuous mode (between them, Spark plans the next
            one: a pause of a few hundred milliseconds).
        commit_interval: seconds between a task's commits in continuous mode (a crash repeats
            at most this much of the outputs).
        epoch_tasks: tasks per epoch in continuous mode, each running some partitions (the
            tasks of an epoch must all run at once: default, the job's task slots, Spark's
            default parallelism, or one per partition if there are fewer partitions).
        on_error: ``fail`` (default), ``skip`` or ``dead_letter`` (to ``<group>-dlq``).
        window_cache: how many windows of each window table (of fixed windows) a partition
            keeps in memory with their values until they close, to read them without its
            store (about 200 bytes each with short keys and values; 0: none).
        fire_budget: the most timers and expiries a partition fires between two commits
            (a record that makes more due commits in slices: memory stays bounded).
        max_offsets_per_trigger: most input records per micro-batch.
        starting_offsets: where a new checkpoint starts: ``earliest`` (default), ``latest``,
            JSON ``{"topic": {"0": 42}}``, or ``group``: the offsets committed to the consumer
            group ``<group>`` (by Go Goka, or by an earlier run with another checkpoint;
            ``earliest`` where none). Tasks commit the group's offsets after each commit of
            their own, so lag tools and Go Goka see them. In every mode, tasks begin at least
            where the group committed, as Go Goka does: what it committed is in the group
            table and is not processed again (to process input again, reset the group's
            offsets or name a new group).
        kafka_config: librdkafka settings for every client.
        producer_config: librdkafka settings for the tasks' producer only (acks, compression).
        topics: creation settings for the group table, loop and DLQ topics.
        snapshot_interval: seconds between snapshots of each partition's stores (0: none). A
            partition that moves to another executor restores its newest snapshot and replays
            only the table records written since, instead of the whole table.
        snapshot_dir: where snapshots go: a path or fsspec URL (``s3://``, ``gs://``,
            ``hdfs://``; shared by all executors). Default: ``<checkpoint_dir>/state``.
        snapshots_kept: snapshots kept per partition.
        snapshot_options: fsspec storage options for ``snapshot_dir`` (credentials...).
        builders: where partition processors get their storage, producer, reader, snapshot
            store and lookup tables (tests swap them; see
            :class:`goka.processing.config.Builders`).
        progress_interval: in continuous mode, seconds between updates of the lag, committed
            offset and commit time metrics and status from the group's commits while an epoch
            runs (batch counts and durations are reported when each epoch ends).
        broker_timeout: seconds a task's read may get nothing before it fails the batch
            (naming the brokers if librdkafka could not reach them); a read that progresses
            goes on however long it takes.
        session: how the session built here is built (its master, ``local[2]`` unless
            spark-submit gives one; the UI; JVM options).
        log_level, log_format: how the Python workers that run the tasks log (None: they
            configure nothing).

    Raises:
        ConfigurationError: an invalid setting, or a snapshot location that cannot be used.
    """

    graph: GroupGraph
    brokers: str
    state_dir: str = "goka-state"
    checkpoint_dir: str = ""
    mode: str = "micro-batch"
    trigger: str = "1 second"
    epoch: float = 30.0
    commit_interval: float = 0.1
    epoch_tasks: int | None = None
    on_error: ErrorPolicy = "fail"
    fire_budget: int = FIRE_BUDGET
    window_cache: int = WINDOW_CACHE
    max_offsets_per_trigger: int | None = None
    starting_offsets: str = "earliest"
    kafka_config: Mapping[str, Any] = field(default_factory=dict)
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    topics: TopicManagerConfig = field(default_factory=TopicManagerConfig)
    snapshot_interval: float = 30.0
    snapshot_dir: str = ""
    snapshots_kept: int = 3
    snapshot_options: Mapping[str, Any] = field(default_factory=dict)
    builders: Builders = field(default_factory=Builders)
    progress_interval: float = 5.0
    tick_interval: float | None = None
    broker_timeout: float = 30.0
    session: SessionSettings = field(default_factory=SessionSettings)
    log_level: str | None = None
    log_format: str = "text"

    def __post_init__(self) -> None:
        self._set(brokers=bootstrap_servers(self.brokers), state_dir=str(self.state_dir))
        if self.trigger == "available-now":
            self._set(mode="available-now")
        self._check()
        # a relative state_dir is resolved by each executor in its own working directory: on
        # a cluster every executor keeps its stores on its own disk
        checkpoint = str(self.checkpoint_dir) or str(
            (Path(self.state_dir) / self.graph.group / "checkpoint").resolve()
        )
        snapshots = str(self.snapshot_dir) or f"{checkpoint.rstrip('/')}/state"
        self._set(checkpoint_dir=checkpoint, snapshot_dir=snapshots)
        if self.snapshot_interval:  # the location must be usable now, not in the first snapshot
            self.builders.snapshots(self.snapshot_dir, keep=self.snapshots_kept,
                                    storage_options=dict(self.snapshot_options))  # fmt: skip

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _check(self) -> None:
        if self.on_error not in POLICIES:
            raise ConfigurationError(f"on_error must be one of {POLICIES}, got {self.on_error!r}")
        if self.tick_interval is not None and self.tick_interval <= 0:
            raise ConfigurationError(f"tick_interval must be > 0, got {self.tick_interval}")
        if (
            isinstance(self.fire_budget, bool)
            or not isinstance(self.fire_budget, int)
            or self.fire_budget < 1
        ):
            raise ConfigurationError(f"fire_budget must be an int >= 1, got {self.fire_budget!r}")
        if (
            isinstance(self.window_cache, bool)
            or not isinstance(self.window_cache, int)
            or self.window_cache < 0
        ):
            raise ConfigurationError(f"window_cache must be an int >= 0, got {self.window_cache!r}")
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise ConfigurationError("max_offsets_per_trigger must be at least 1")
        if self.mode not in MODES:
            raise ConfigurationError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not 0 < self.commit_interval < self.epoch:
            raise ConfigurationError(
                f"need 0 < commit_interval < epoch, got commit_interval={self.commit_interval}, "
                f"epoch={self.epoch}"
            )
        if self.epoch_tasks is not None and self.epoch_tasks < 1:
            raise ConfigurationError(f"epoch_tasks must be at least 1, got {self.epoch_tasks}")
        for name in ("progress_interval", "broker_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.snapshot_interval < 0:
            raise ConfigurationError(
                f"snapshot_interval must be >= 0, got {self.snapshot_interval}"
            )
        _check_starting_offsets(self.starting_offsets)

    @property
    def stop_url(self) -> str:
        """Where the driver asks the tasks of an epoch to stop (beside the checkpoint)."""
        return f"{self.checkpoint_dir.rstrip('/')}/goka-stop"

    @property
    def board_url(self) -> str:
        """Where tasks say what their partitions do while they recover (beside the checkpoint)."""
        return f"{self.checkpoint_dir.rstrip('/')}/goka-partitions"

    def task_config(self, *, continuous: bool = False) -> TaskConfig:
        """What the tasks are given (for epochs if ``continuous``)."""
        producer_config = dict(self.producer_config)
        if continuous:  # outputs leave at once, not in 10 ms batches
            producer_config = {"linger.ms": 1, **producer_config}
        return TaskConfig(
            self.graph, self.brokers, self.state_dir, self.on_error, dict(self.kafka_config),
            producer_config, snapshot_url=self.snapshot_dir,
            snapshot_interval=self.snapshot_interval, snapshots_kept=self.snapshots_kept,
            snapshot_options=dict(self.snapshot_options), builders=self.builders,
            epoch=self.epoch if continuous else 0.0, commit_interval=self.commit_interval,
            stop_url=self.stop_url if continuous else None, board_url=self.board_url,
            read_timeout=self.broker_timeout, log_level=self.log_level,
            fire_budget=self.fire_budget, window_cache=self.window_cache,
            log_format=self.log_format,
        )  # fmt: skip


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
