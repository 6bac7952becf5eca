"""Where a broker that speaks Kafka's protocol differs from Apache Kafka, and what goka-py does
about it: every such workaround is named here and applies only where that broker is detected.

The one broker known to differ is Tansu (0.6), the light development broker
(:mod:`goka.dev.tansu`). Measured on it, and on Apache Kafka 4.4 in the same runs:

* **Queried high watermarks** (``ListOffsets(latest)``, ``get_watermark_offsets(cached=
  False)``) answer the base offset of the partition's last record batch + 1, not the high
  watermark. Workaround (:attr:`Quirks.queried_watermark_is_batch_start`): where a partition
  holds records, fetch its last reported record and take the high watermark of the fetch
  response (:class:`goka.kafka.offsets.EndOffsets`). Apache Kafka answers the high watermark:
  no fetch.
* **Aborted transactions are not isolated**: a ``read_committed`` consumer reads aborted
  records. No workaround is possible; nothing of goka-py may rely on transactions there.
* Not implemented, and not relied upon anywhere: compaction, retention, ``CreatePartitions``,
  ``DeleteRecords``; ``offsets_for_times`` answers 0; deleting a topic that a librdkafka 2.16
  client holds in its metadata cache crashes that client (tests replace the broker instead).
* Slower where Kafka is not: a fetch waits ``fetch.wait.max.ms`` even when records are there,
  a group join half the session timeout, and latency grows as topics grow. goka-py's readers
  wait at most 10 ms per fetch on every broker (they read ranges whose end they know, and
  learn it from an empty fetch). On Kafka, which answers a fetch as soon as records come,
  the cost is the idle fetches: an idle continuous processor's two consumers ask about 185
  times a second, which takes the broker 0.06 cores (``bench.idle``: 0.12 against 0.06 for
  a broker serving nobody), less than a plain consumer with the same wait.

Tansu is recognised by its cluster id (``tansu_cluster`` unless started with another one);
any other cluster is taken to be Apache Kafka or a broker that behaves as it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from goka.kafka.admin import cluster_of

__all__ = ["KAFKA", "TANSU", "Quirks", "quirks_of"]


@dataclass(frozen=True)
class Quirks:
    """What a broker does differently from Apache Kafka (all False: nothing).

    Attributes:
        name: the broker's name, for messages.
        queried_watermark_is_batch_start: a queried high watermark is the last record batch's
            base offset + 1; the high watermark is learnt from a fetch instead.
        isolates_aborted: a ``read_committed`` consumer skips aborted transactions.
    """

    name: str
    queried_watermark_is_batch_start: bool = False
    isolates_aborted: bool = True


#: Apache Kafka, and brokers that behave as it does.
KAFKA = Quirks("Apache Kafka")
#: Tansu, the light development broker.
TANSU = Quirks("Tansu", queried_watermark_is_batch_start=True, isolates_aborted=False)


def quirks_of(client: Any, timeout: float) -> Quirks:
    """Return the quirks of the cluster any confluent-kafka ``client`` talks to.

    Raises:
        BrokerError: if no broker answered within ``timeout`` seconds.
    """
    cluster_id = cluster_of(client, timeout).cluster_id or ""
    return TANSU if cluster_id.startswith("tansu") else KAFKA
