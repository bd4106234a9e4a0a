"""Which source consumer reads each feed: a few consumers per source cluster (a lane's strands), not one per link.

A consumer per link fetched for each link on its own. With one busy partition a link, 20 links of one source cluster
kept the gateway at 95 % and noida-db (which answers an empty fetch at once) at 70 % of a core for 20 records a second;
Tansu at 21 % (bench/scale.py --trickle 1, BENCHMARKS.md). The links of a source cluster share a lane, except where
two links read the same source stream (two replicas of it in this destination cluster): a consumer holds a partition
once, at one position, so the second link takes the cluster's next lane. A link keeps its lane while it is in the plan.

A lane is read by `fan` consumers, its strands, each its own connection to the source: librdkafka keeps one fetch in
flight per broker connection, and a broker answers a fetch with a few MB at most (Tansu 0.6: ~4.2 MB whatever is
asked), so one consumer across a round trip R moves at most that much per R (84 MB/s at 50 ms, about 80k records/s of
1 KiB: docs/notes/bench-wan.md). A feed's strand is chosen by its partition number (partition mod fan) and the fan is fixed
while the lane exists, so a feed never moves between consumers while its link is in the plan.

The fan is the source's registry entry's (`streamrepl.source.consumers`), else chosen from how far the source is: on
loopback four consumers cost the gateway a fifth of its rate and 90 MB more memory for nothing (bench/run.py, 1 KiB,
the same minutes: 0.55-0.65x the idempotent C relay against 0.80-1.16x with one), so a lane whose first consumer's
first topic lookup came back quickly has one, and one across a long line has SOURCE_CONSUMERS (lookup_fan).
"""

from __future__ import annotations

from collections.abc import Callable

from .links import Link

#: Consumers a lane reads a distant source with, unless the cluster's registry entry says (`streamrepl.source.consumers`).
#: Measured (docs/notes/bench-wan.md, "Several fetches in flight"): at 100 ms one consumer stopped at Tansu's ~4.2 MB a round
#: trip (42 MB/s); four carry 168 MB/s, more than the gateway writes on loopback, so 100 ms costs it little.
SOURCE_CONSUMERS = 4
#: A lane's first topic lookup (a new client: its connection, ApiVersions and Metadata, mostly 2 round trips) slower
#: than this is taken for a long line. One consumer moves ~4.2 MB a round trip: up to a round trip of about 30 ms that
#: is more than the gateway writes (~150 MB/s at best). Seen in bench/wan.py (a8b93eb): 4-52 ms on loopback (52 ms for
#: the first topic of a fresh Tansu), 101-206 ms at 50 ms, 201-404 ms at 100 ms.
LONG_LINE_LOOKUP = 0.08


def lookup_fan(seconds: float | None) -> int:
    """The fan of a lane whose registry entry names none, from how long its first topic lookup took (None: it did
    not answer in time, taken for a long line)."""
    return 1 if seconds is not None and seconds < LONG_LINE_LOOKUP else SOURCE_CONSUMERS


def strand_name(lane: str, index: int) -> str:
    """The name of a lane's strand (its consumer) `index`."""
    return f"{lane}/{index}"


class Lanes:
    def __init__(self) -> None:
        #: link name -> its lane
        self.of: dict[str, str] = {}
        #: lane -> how many strands (consumers) it has, fixed while it exists
        self.fan: dict[str, int] = {}
        #: strand -> the names of the links whose feeds it reads
        self.links: dict[str, set[str]] = {}
        #: strand -> source Kafka topic -> the link whose feeds of that topic it reads
        self.routes: dict[str, dict[str, str]] = {}
        #: link name -> its source stream (which links may not share a lane)
        self._stream: dict[str, str] = {}
        #: link name -> the strands its feeds were given
        self._strands: dict[str, set[str]] = {}

    def lane(self, link: Link, fan: Callable[[str], int] | None = None) -> str:
        """The lane of `link`, given it when it has none: the first of its source cluster without its source stream.
        A lane made now has the fan its source's registry entry names, else `fan(lane)` (else SOURCE_CONSUMERS)."""
        lane = self.of.get(link.name)
        if lane is not None:
            return lane
        stream = str(link.src)
        taken = {self.of[name] for name, s in self._stream.items() if s == stream}
        k = 0
        while f"{link.src_cluster.name}#{k}" in taken:
            k += 1
        lane = self.of[link.name] = f"{link.src_cluster.name}#{k}"
        self._stream[link.name] = stream
        if lane not in self.fan:
            named = link.src_cluster.source_consumers
            self.fan[lane] = named or (fan(lane) if fan is not None else SOURCE_CONSUMERS)
        return lane

    def strand(self, link: Link, partition: int, fan: Callable[[str], int] | None = None) -> str:
        """The strand (the consumer's name) that reads the link's feeds of source `partition`; the link is one of
        its readers from now on. `fan`: as for `lane`."""
        strand = self._strand(self.lane(link, fan), partition)
        self.links.setdefault(strand, set()).add(link.name)
        self._strands.setdefault(link.name, set()).add(strand)
        return strand

    def strand_of(self, link_name: str, partition: int) -> str | None:
        """The strand that reads the link's feeds of source `partition` (None: the link has no lane). Also asked from
        the metrics thread (SourceFeeds.pending): a lane released meanwhile answers None."""
        lane = self.of.get(link_name)
        fan = self.fan.get(lane) if lane is not None else None
        return None if lane is None or fan is None else _strand(lane, fan, partition)

    def _strand(self, lane: str, partition: int) -> str:
        return _strand(lane, self.fan[lane], partition)

    def route(self, strand: str, topic: str, link_name: str) -> None:
        """The strand's records of source `topic` are `link_name`'s."""
        self.routes.setdefault(strand, {})[topic] = link_name

    def release(self, link_name: str) -> None:
        """The link left the plan: its lane is free for another link of its source stream, and its strands are
        dropped when they read no other link (the lane, with its fan, when no link has it)."""
        lane = self.of.pop(link_name, None)
        self._stream.pop(link_name, None)
        for strand in self._strands.pop(link_name, set()):
            names = self.links.get(strand, set())
            names.discard(link_name)
            routes = self.routes.get(strand, {})
            for topic in [t for t, name in routes.items() if name == link_name]:
                del routes[topic]
            if not names:
                self.links.pop(strand, None)
                self.routes.pop(strand, None)
        if lane is not None and lane not in self.of.values():
            self.fan.pop(lane, None)


def _strand(lane: str, fan: int, partition: int) -> str:
    return strand_name(lane, partition % fan)
