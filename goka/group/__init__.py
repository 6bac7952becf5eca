"""A processor group: its declaration, and the engine that runs its callbacks per record.

Declaration (what users write, validated when written):

* :mod:`~goka.group.edges`: the edges (``input``, ``join``, ``lookup``, ``loop``, ``output``,
  ``persist``, ``window``, ``timers``), each checking what it can alone;
* :mod:`~goka.group.graph`: ``define_group`` and the rules of the whole graph
  (:class:`~goka.group.graph.GroupGraph`, its topics and what keeps time).

The per-record engine (pure Python, no I/O; the tester and the partition runtime both drive it):

* :mod:`~goka.group.effects`: what it reads and leaves: messages, effects (table updates,
  emits, loopbacks, time rows, final results) and a batch's result;
* :mod:`~goka.group.context`: what a callback gets (``ctx``), with its time methods in
  :mod:`~goka.group.context_time`; the context is handed narrow callables and the
  partition's time (as :class:`goka.time.ports.PartitionClock`), never the engine;
* :mod:`~goka.group.engine`: runs the callbacks over one partition's messages in offset order,
  with the state cache, error policies and undo;
* :mod:`~goka.group.firing`: a timed group's records: event time moves the stream time, and
  what is due fires after each record (timers call back, windows close and expire).

Time itself (windows, timers, stream time, TTL, how they are stored) is :mod:`goka.time`.
Dependencies point one way: the declaration imports window specs from ``goka.time``; the
partition's time imports the declaration; the engine imports both.
"""
