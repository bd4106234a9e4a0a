"""Whether this gateway is still allowed to serve its cluster (`cluster gateway set`; see gateway_lists.py).

A gateway checks once before it joins the slot group (check_now: one not on the list never takes a slot), then
follows the status topic in a thread of its own: reading the whole topic every few seconds would cost more and
more as the gateways' reports pile up, so the thread reads on from where it was and judges the list each time it
has read to the end (a list read half-way, an older one, must not stop a gateway the newer one allows).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import cast

from .. import gateway_lists, kafka, statustopic
from ..kafka import Consumer, KafkaException, TopicPartition
from ..registry import Cluster

log = logging.getLogger("streamrepl.gateway")

#: how often the end of the status topic is asked for while it is read to its end (its partition paused meanwhile)
CHECK_SECONDS = 1.0
#: how long one read of the status topic waits for records: short, since the partition is fetched all that time,
#: and a broker that answers an empty fetch at once (noida-db) is asked about 1,000 times a second meanwhile
READ_SECONDS = 0.05
#: how long a fetch of the status topic may wait at the broker: the list needs no faster look than CHECK_SECONDS
FOLLOW_FETCH_WAIT_MS = 500


class AllowList:
    """`refusal` is why this gateway may no longer serve ("" while it may); the gateway's loop reads it."""

    def __init__(
        self,
        cluster: Cluster,
        gateway_id: str,
        host: str,
        new_consumer: Callable[..., Consumer] = kafka.consumer,
        read_list: Callable[[Cluster], list[str]] = gateway_lists.allowed,
        parent_id: str | None = None,
    ):
        self.cluster = cluster
        self.gateway_id = gateway_id
        self.host = host
        #: a worker of `gateway start -workers` is allowed by its supervisor's id too (workers.py)
        self.parent_id = parent_id
        self.refusal = ""
        self.stopping = False
        self._new_consumer = new_consumer
        self._read_list = read_list
        self._thread: threading.Thread | None = None

    def check_now(self) -> str:
        """Read the list to its end now; the refusal ("" when allowed)."""
        self.refusal = self._judge(self._read_list(self.cluster))
        return self.refusal

    def _judge(self, gateways: list[str]) -> str:
        return gateway_lists.refusal(self.cluster.name, gateways, self.gateway_id, self.host, self.parent_id)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="gateway-list", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping = True

    def _follow(self) -> None:
        consumer = self._new_consumer(self.cluster, **{"fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS})
        tp = TopicPartition(statustopic.STATUS_TOPIC, 0)
        try:
            consumer.assign([TopicPartition(statustopic.STATUS_TOPIC, 0, 0)])
            gateways: list[str] = []
            while not self.stopping:
                try:
                    gateways, at_end = self.read_on(consumer, gateways)
                except Exception:  # noqa: BLE001 - the check must outlive a bad read; the gateway keeps serving
                    log.exception("reading the gateway list failed")
                    time.sleep(CHECK_SECONDS)  # not a busy loop of the same error
                    continue
                if at_end:
                    refusal = self._judge(gateways)
                    if refusal and not self.refusal:
                        log.warning("%s: stopping", refusal)
                    self.refusal = refusal
                    self._wait_for_more(consumer, tp)
        finally:
            consumer.close()

    def _wait_for_more(self, consumer: Consumer, tp: TopicPartition) -> None:
        """At the end of the status topic: stop fetching it until its end moves, asked for every CHECK_SECONDS (one
        ListOffsets request). A broker that answers an empty fetch at once whatever the wait (noida-db) was otherwise
        asked about 1,000 times a second by every idle gateway. The end can be low on Tansu (the last batch's base
        offset + 1) but a new batch still moves it past the position. An exact end below the position is a broker
        that lost its tail: the records written there next would lie below the position, so the follower fetches
        again (out of range, the consumer reads the topic from its start)."""
        consumer.pause([tp])
        exact = kafka.watermark_is_exact(self.cluster)
        try:
            at = consumer.position([tp])[0].offset
            while not self.stopping and at >= 0:
                time.sleep(CHECK_SECONDS)
                try:
                    _, high = consumer.get_watermark_offsets(tp, timeout=CHECK_SECONDS, cached=False)
                except KafkaException:
                    return  # read on: the read says what is wrong
                if high > at or (exact and high < at):
                    return
        finally:
            consumer.resume([tp])

    @staticmethod
    def read_on(consumer: Consumer, gateways: list[str], timeout: float = READ_SECONDS) -> tuple[list[str], bool]:
        """The list after the records read now, and whether the topic was read to its end."""
        at_end = False
        for m in consumer.consume(1000, timeout=timeout):
            err = m.error()
            if err is not None:
                at_end = at_end or kafka.is_partition_eof(err)
                continue
            at_end = False  # records after an end seen in this batch: judge after the next end
            if m.key() == gateway_lists.CONFIG_KEY.encode():
                value = m.value()
                gateways = list(json.loads(cast(bytes, value)).get("gateways", [])) if value is not None else []
        return gateways, at_end
