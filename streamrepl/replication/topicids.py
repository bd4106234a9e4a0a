"""Which topics the gateway's long-lived consumers may know by a deleted topic's id.

librdkafka keeps every topic a client has read, with its topic id, for the client's whole life, and fetches by that id.
A topic deleted and created again under its name (a source stream deleted and created again, `stream replica resync`,
a replica topic deleted and created again by the gateway) was then fetched by the deleted topic's id, and Tansu's
answer killed the whole gateway (librdkafka 2.16, SIGSEGV; issues 23 and 25). Asked for by name first (a Metadata
request for that one topic), the client learns the topic's new id and fetches by it.

streamrepl deletes a topic only once no gateway reads it (`stream delete`, `stream topic delete` and `replica resync`
wait for the gateways to let it go), so only a topic a consumer let go and reads again is asked for: the consumers of
the source partitions (one per lane, lanes.py, outliving the links that leave the plan), the divergence probes and the
reader of the replica partitions. A topic that stayed in use, or that a consumer never read, costs nothing.
"""

from __future__ import annotations

import logging
import threading

from .. import kafka
from ..kafka import Consumer, KafkaException

log = logging.getLogger("streamrepl.gateway")

#: How long the loop waits for a cluster to say what a topic read again is now (seconds).
ASK_TIMEOUT = 2.0
#: ask_ahead asks for at most this many topics at once (a thread each); the others are asked for by ready()
MAX_ASKED = 32


class TopicIds:
    """The topics each named consumer has read, and those of them it let go since (their id may have changed)."""

    def __init__(self) -> None:
        #: consumer name -> the topics it has read
        self._read: dict[str, set[str]] = {}
        #: consumer name -> the topics it read and let go since
        self._let_go: dict[str, set[str]] = {}

    def let_go(self, name: str, topic: str) -> None:
        """The consumer stopped reading `topic` (it may be deleted and created again before it is read again)."""
        if topic in self._read.get(name, ()):
            self._let_go.setdefault(name, set()).add(topic)

    def ready(self, name: str, consumer: Consumer, topic: str, timeout: float = ASK_TIMEOUT) -> bool | str:
        """Call before the consumer reads `topic`: a topic it let go is asked for first, so that it is fetched by its
        id of now. True: read it; otherwise not now, and why: "down" (the cluster does not answer) or "unread" (it
        has no such topic now)."""
        let_go = self._let_go.get(name)
        if let_go and topic in let_go:
            try:
                found = kafka.partitions_of(consumer, topic, timeout)
            except KafkaException as e:
                log.debug("could not ask for topic %s again: %s", topic, e)
                return "down"
            if found is None:
                return "unread"
            let_go.discard(topic)
        self._read.setdefault(name, set()).add(topic)
        return True

    def ask_ahead(self, name: str, consumer: Consumer, topics: set[str], timeout: float = ASK_TIMEOUT) -> None:
        """Ask for the topics among `topics` that the consumer let go all at once (a request each, sent together),
        before ready() is called for each: asked one by one, each was a round trip in series (a takeover of a
        stream's topics across a 50 ms line, issue 28). A topic not found, or not answered, is left to ready()."""
        self.ask_ahead_of({name: (consumer, topics)}, timeout)

    def ask_ahead_of(self, asks: dict[str, tuple[Consumer, set[str]]], timeout: float = ASK_TIMEOUT) -> None:
        """ask_ahead for several consumers (name -> the consumer and its topics), all at once: a lane's strands read
        one topic each, which none would ask ahead alone, and each then asked in series (a noida-db takeover across a
        50 ms line took up its 4 partitions 50-75 ms apart)."""
        todo = [
            (name, consumer, topic)
            for name, (consumer, topics) in sorted(asks.items(), key=lambda kv: kv[0])
            for topic in sorted(topics)
            if topic in self._let_go.get(name, ())
        ]
        if len(todo) < 2:
            return
        found: dict[tuple[str, str], int | None] = {}

        def ask(name: str, consumer: Consumer, topic: str) -> None:
            try:
                found[(name, topic)] = kafka.partitions_of(consumer, topic, timeout)
            except KafkaException as e:
                log.debug("could not ask for topic %s again: %s", topic, e)

        askers = [threading.Thread(target=ask, args=a, name="topic-ids", daemon=True) for a in todo[:MAX_ASKED]]
        for t in askers:
            t.start()
        for t in askers:
            t.join()
        for (name, topic), partitions in found.items():
            if partitions is not None:
                self._let_go[name].discard(topic)
                self._read.setdefault(name, set()).add(topic)

    def closed(self, name: str) -> None:
        """The consumer was closed: one made under its name knows nothing."""
        self._read.pop(name, None)
        self._let_go.pop(name, None)
