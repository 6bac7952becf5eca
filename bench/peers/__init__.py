"""goka-py beside the systems its users would pick instead, on the same broker, input and cores.

``python -m bench.peers`` (:mod:`bench.peers.__main__`) runs, one after another on one Apache
Kafka development broker and the same generated input (``bench.windows.fill``: 1M clicks over
100k keys, 4 partitions, event times over 20 minutes):

* goka-py, in micro-batches and in continuous mode (a local SparkSession, ``local[2]``);
* Kafka Streams (:mod:`bench.peers.kstreams`: two stream threads, state in RocksDB, caching at
  its defaults), at least once and with ``exactly_once_v2``;
* quixstreams (``bench/quix_count.py`` in ``.venv-quix``, made by ``make bench``), at least once
  (``--quix-guarantees at-least-once,exactly-once`` for both);

each doing the plain count per key (one table update per event), a tumbling 1-minute and a
hopping 5-minute (advancing by 1 minute) windowed count with grace 5 s and final results.
"""
