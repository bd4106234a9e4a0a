"""Consumer failover: the copies of a stream a StreamConsumer may read, which one it reads, and when to leave it.

A copy counts as alive while fetches return records or a metadata request (sent at most every
`probe_interval` seconds while no record arrives, and at once after a transport error)
succeeds. When neither happened for `failover_after` seconds, the consumer leaves it for the
next copy that answers, in list order, cycling (see the package doc).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import kafka
from ..errors import InvalidArgument
from ..kafka import Consumer, KafkaError, KafkaException
from ..paths import split_topic
from ..registry import Cluster, Registry
from ..streams import Resolved, resolve

log = logging.getLogger("streamrepl.client")

TRANSPORT_ERRORS = kafka.TRANSPORT | {kafka.KafkaError._RESOLVE}


@dataclass
class Copy:
    text: str
    r: Resolved
    topics: list[str]  # topics named in the copy's path (`/c/stream:topic`)


class Failover:
    """The copies, the one being read (`index`), and whether it is still alive.

    `ping(cluster, timeout)` says whether a copy's cluster answers (a fake in unit tests).
    """

    def __init__(
        self,
        reg: Registry,
        texts: list[str],
        failover_after: float,
        probe_interval: float,
        probe_timeout: float,
        ping: Callable[[Cluster, float], bool] = kafka.ping,
    ):
        if not texts:
            raise InvalidArgument("give at least one copy of the stream to read")
        self.copies: list[Copy] = []
        #: topics named in the copies' paths, in order of appearance
        self.named: list[str] = []
        for text in texts:
            stream_text, topic = split_topic(text)
            r = resolve(reg, stream_text)
            self.copies.append(Copy(text, r, [topic] if topic else []))
            if topic and topic not in self.named:
                self.named.append(topic)
        self.failover_after = failover_after
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.failovers = 0
        self.index = -1
        self._ping = ping
        self._suspect = False
        self._last_ok = time.monotonic()
        self._last_probe = 0.0
        self._retry_at = 0.0
        self._closing: list[threading.Thread] = []

    @property
    def copy(self) -> Copy:
        return self.copies[self.index]

    def answers(self, i: int) -> bool:
        if self._ping(self.copies[i].r.cluster, self.probe_timeout):
            return True
        log.warning("copy %s does not answer", self.copies[i].r.path)
        return False

    def after_current(self) -> list[int]:
        """Every copy, the one after the current first and the current last."""
        n = len(self.copies)
        return [(self.index + k) % n for k in range(1, n + 1)]

    def opened(self, i: int) -> None:
        self.index = i
        self._cleared()

    def _cleared(self) -> None:
        self._last_ok = time.monotonic()
        self._suspect = False

    def answered(self) -> None:
        """The copy delivered records or confirmed a commit."""
        self._last_ok = time.monotonic()

    def on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback, and errors among fetched records: a transport error means probe now."""
        if err.code() in TRANSPORT_ERRORS:
            self._suspect = True

    def suspect(self) -> None:
        self._suspect = True

    def _probe(self, c: Consumer, topic: str | None) -> None:
        self._last_probe = time.monotonic()
        try:
            if topic:
                c.list_topics(topic=topic, timeout=self.probe_timeout)
            else:
                c.list_topics(timeout=self.probe_timeout)
            self._cleared()
        except KafkaException:
            pass

    def silent_too_long(self, c: Consumer, topic: str | None) -> bool:
        """Probe the copy when due; True when it has not answered for `failover_after` seconds."""
        now = time.monotonic()
        if self._suspect or now - self._last_probe >= self.probe_interval:
            self._probe(c, topic)
        return time.monotonic() - self._last_ok > self.failover_after

    def leaving(self) -> None:
        self.failovers += 1
        log.warning(
            "copy %s has not answered for %.0f s; failing over (%d copies to try)",
            self.copy.r.path,
            self.failover_after,
            len(self.copies),
        )

    def none_answers(self) -> None:
        self._retry_at = time.monotonic() + 1.0

    def wait_before_retry(self, timeout: float) -> bool:
        """Sleep (at most `timeout`) while the last round found no copy; True when it slept."""
        if time.monotonic() >= self._retry_at:
            return False
        time.sleep(max(0.0, min(timeout, self._retry_at - time.monotonic())))
        return True

    def drop(self, c: Consumer) -> None:
        # Closing a consumer whose broker stalls blocks for seconds: do it aside.
        t = threading.Thread(target=_close_quietly, args=(c,), daemon=True, name="streamrepl-close")
        t.start()
        self._closing.append(t)

    def join(self) -> None:
        for t in self._closing:
            t.join(10)


def _close_quietly(c: Consumer) -> None:
    try:
        c.close()
    except Exception:  # noqa: BLE001 - the copy is being abandoned
        pass
