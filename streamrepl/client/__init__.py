"""The Python API for applications: a stream producer and a stream consumer that fails over.

    from streamrepl.client import StreamProducer, StreamConsumer

    with StreamProducer("/sanfrancisco/activity") as p:
        p.produce("clicks", b"hello", key=b"user-1", headers={"source": b"web"})
        p.flush()

    c = StreamConsumer(["/sanfrancisco/activity", "/newyork/activity"], group="billing", topics=["clicks"])
    for rec in c:                          # StreamRecord: topic, partition, offset, key, value, headers, timestamp
        handle(rec)
        c.commit()

Topics are named by their stream topic name (`clicks`), never by the Kafka topic behind it.

Modules: producer (StreamProducer, Delivery, synchronous replicas), consumer (StreamConsumer),
failover (which copy a consumer reads and when it leaves it), positions (where it starts on a
copy, what it delivered and committed), access (a stream's metadata, permissions, topic names).

Consumer failover
    A StreamConsumer reads one copy of a stream at a time: the first copy in its list that
    answers. It counts the copy as alive while fetches return records or a metadata request
    (sent at most every `probe_interval` seconds while no record arrives, and at once after a
    transport error) succeeds. When neither happened for `failover_after` seconds, it leaves
    that copy and continues on the next one that answers, in list order, cycling; it does not
    go back on its own while the current copy works.

    On the new copy a consumer group resumes from its committed offsets there (which the
    gateways replicate, see streamrepl.cursors), or from the offsets this consumer itself
    committed on the copy it left, whichever is further: offsets are preserved between
    copies, so both name the same records. Nothing is lost; the records delivered after the
    last commit are delivered again. Without a group, the consumer resumes right after the
    last record it delivered. Filler records (see streamrepl.policy) are never delivered.

Synchronous replication
    For every replica that the stream's metadata lists with `synchronous: true` (and not
    paused), a StreamProducer acknowledges a record (its delivery callback, `flush()`,
    `send()`) only once the record's offset is in the replica's partition. When that takes
    longer than `sync_timeout` seconds, or the replica's partition makes no progress for
    `sync_stall` seconds (no gateway alive), the producer falls back to asynchronous
    acknowledgement for that replica, logs a warning and counts it in `stats["fallbacks"]`.
    It checks every `sync_recheck` seconds whether the replica has caught up with everything
    it wrote, and then returns to synchronous (`stats["recoveries"]`).
"""

from .consumer import StreamConsumer, StreamRecord
from .producer import Delivery, StreamProducer

__all__ = ["Delivery", "StreamConsumer", "StreamProducer", "StreamRecord"]
