"""Time in a processor group: windows, timers, stream time and TTL.

A timed group (a window, timers or a TTL) keeps, beside its table, a *timers* section and a
section per window table in its partition store, each with its changelog topic
(``<group>-timers``, ``<group>-window-<name>``), written in the same atomic commit as its
values and offsets. Stream time is per partition: the highest event time seen, never going
back. After each record, what is due by the stream time (and by the wall clock, ticked by
``<group>-ticks``) fires in time order; at equal times windows close before timers fire.

* :mod:`~goka.time.specs`: window specs (tumbling, hopping, session, calendar) and their
  arithmetic: which windows a time belongs to;
* :mod:`~goka.time.rows`: how time state is stored: keys with 15-digit times, timers and
  due index rows, window keys, close index rows, the headers of final results;
* :mod:`~goka.time.overlay`: a section as a batch sees it (its changes over the committed
  rows) and the journal that undoes a failed record;
* :mod:`~goka.time.partition`: the time of one partition
  (:class:`~goka.time.partition.PartitionTime`): stream time, what is due next; it mixes in
  :mod:`~goka.time.timers` (setting timers, the due queues), :mod:`~goka.time.ttl` (keys
  that expire) and :mod:`~goka.time.window_tables` (writing windows; where windows close and
  expire);
* :mod:`~goka.time.open_windows`: what ``ctx.window(name)`` returns: the record's open
  windows, late records, sessions merging;
* :mod:`~goka.time.window_cache`: the windows an engine wrote, kept until they close so it
  reads them without the store;
* :mod:`~goka.time.pending_rows`: time rows written since the last commit (a continuous
  partition commits many batches at once);
* :mod:`~goka.time.event_time`: where a record's event time comes from;
* :mod:`~goka.time.ports`: the protocols a context and its partition's time see each other
  through (so neither imports the other).

What fires (calling the group's callbacks) is the engine's: :mod:`goka.group.firing`. Users
read window tables with :mod:`goka.windows`.
"""
