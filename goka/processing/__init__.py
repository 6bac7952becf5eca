"""The partition runtime: what a processor's Spark tasks do with their Goka partitions.

Each Spark task is a Goka partition processor. It leases the partition's stores (LevelDB, kept
open by its worker process between tasks), makes them current for where it begins, runs the
engine core (:mod:`goka.group.engine`) over the records the stores have not applied yet,
produces the effects, and commits state with offsets. A micro-batch does this once for the
offset ranges Spark planned (:mod:`~goka.processing.batch`); a continuous epoch follows its
partitions for ``epoch`` seconds and commits every ``commit_interval``
(:mod:`~goka.processing.epoch`).

**The rule everything rests on**: a partition store's applied offsets never go backwards, and
every record below them is skipped, whatever range Spark plans (a micro-batch run again after a
crash, the first epoch after a bridge, a bounded run after a continuous one, any
``max_offsets_per_trigger``). One module decides what of a range is applied and owns the only
write of state with offsets (:mod:`~goka.processing.applied`); one class owns a partition's
stores and commits for both paths (:class:`~goka.processing.stores.PartitionStores`):

1. lease the group store and the joined tables' stores; make the group store current for
   where the task begins, i.e. Spark's planned start or the group's committed offsets if
   further (reuse it, catch it up from the table, restore a snapshot, rebuild it:
   :mod:`~goka.processing.recovery`); joined stores up to the batch's start (or, in an epoch,
   their table's end);
2. read what the stores have not applied; apply the joined tables' records before the input
   records they serve; run the engine;
3. produce table updates (to the same partition of ``<group>-table``, with headers naming the
   source topic/partition/offset), emits, loopbacks and dead letters with one producer; flush
   and check every delivery (:mod:`~goka.processing.output`);
4. only then commit the state changes, the input offsets and the group table's end offset in
   one write; then tell Kafka the group's offsets;
5. at most every ``snapshot_interval``, stage a snapshot (a hard-link copy) that the worker
   uploads in the background (:mod:`~goka.processing.uploads`).

State is exactly-once (a timed group's timers, windows and stream time are state: rows of
sections of the group store, with changelogs of their own); outputs are at-least-once (a crash
between 3 and 4 repeats them: in an epoch, at most one commit interval's), except windows'
final results, exactly once: read back from the store after the commit that closed their
windows, behind a delivered watermark (:mod:`~goka.processing.finals`). Every
collaborator comes from :class:`~goka.processing.builders.Builders`, so tests run all of this
without Spark or a broker and crash tests inject faults through them. What a task did is counted in
:mod:`~goka.processing.summary`.

Modules, one concept each; a module imports only modules listed above it:

* ``settings``: :class:`ProcessorSettings`, every setting of a processor, declared once with
  its description and check.
* ``builders``: :class:`Builders`, where a task's collaborators come from.
* ``config``: :class:`TaskConfig`, what a task is given (the settings, and what the driver
  adds; pickled with it).
* ``signals``: the stop file and the partition board beside the checkpoint.
* ``holders``: asking the process that holds a store open to release it.
* ``leases``: stores lent to one task at a time and kept open between tasks.
* ``uploads``: snapshot uploads in the background.
* ``worker``: a worker process's shared resources (clients, stores, uploads, bridges).
* ``clients``: a group's clients, built from its builders, kept by the worker.
* ``exactly_once``: each commit one Kafka transaction; a new writer fences the last one.
* ``summary``: what a task did, one row per partition.
* ``applied``: what a store has applied, and the only write of state with offsets.
* ``recovery``: making a store current.
* ``output``: producing a task's effects and checking every delivery.
* ``outbox``: where final results may be already, under at-least-once.
* ``finals``: windows' final results, from the store after the commit, exactly once.
* ``group_offsets``: the group's offsets in Kafka, told after the store's (at-least-once).
* ``stores``: one partition's stores for one task, the owner of recovery and commits.
* ``batch``: a micro-batch (:class:`PartitionProcessor`).
* ``epoch``: continuous epochs (:func:`run_epoch`) and the bridges between them.
"""

from typing import TYPE_CHECKING

from goka._lazy import lazy_exports

if TYPE_CHECKING:  # imported where first used (goka._lazy): a task imports what it runs
    from goka.processing.batch import PartitionProcessor
    from goka.processing.builders import Builders, LookupTable, leveldb_store, lookup_view
    from goka.processing.config import TaskConfig
    from goka.processing.epoch import run_epoch
    from goka.processing.settings import ProcessorSettings
    from goka.processing.summary import Counts, PartitionSummary
    from goka.processing.worker import Worker

__all__ = [
    "Builders",
    "Counts",
    "LookupTable",
    "PartitionProcessor",
    "PartitionSummary",
    "ProcessorSettings",
    "TaskConfig",
    "Worker",
    "leveldb_store",
    "lookup_view",
    "run_epoch",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "goka.processing.batch": ("PartitionProcessor",),
        "goka.processing.builders": ("Builders", "LookupTable", "leveldb_store", "lookup_view"),
        "goka.processing.config": ("TaskConfig",),
        "goka.processing.settings": ("ProcessorSettings",),
        "goka.processing.epoch": ("run_epoch",),
        "goka.processing.summary": ("Counts", "PartitionSummary"),
        "goka.processing.worker": ("Worker",),
    },
)
