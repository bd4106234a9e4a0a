"""Which source consumer reads each link's feeds: one consumer per source cluster, not one per link.

A consumer per link fetched for each link on its own. With one busy partition a link, 20 links of one source cluster
kept the gateway at 95 % and noida-db (which answers an empty fetch at once) at 70 % of a core for 20 records a second;
Tansu at 21 % (bench/scale.py --trickle 1, BENCHMARKS.md). The links of a source cluster share a consumer (a lane),
except where two links read the same source stream (two replicas of it in this destination cluster): a consumer holds
a partition once, at one position, so the second link takes the cluster's next lane. A link keeps its lane while it is
in the plan, so its feeds never move between consumers.
"""

from __future__ import annotations

from .links import Link


class Lanes:
    def __init__(self) -> None:
        #: link name -> its lane
        self.of: dict[str, str] = {}
        #: lane -> the names of the links it reads
        self.links: dict[str, set[str]] = {}
        #: lane -> source Kafka topic -> the link whose feeds of that topic it reads
        self.routes: dict[str, dict[str, str]] = {}
        #: link name -> its source stream (which links may not share a lane)
        self._stream: dict[str, str] = {}

    def lane(self, link: Link) -> str:
        """The lane of `link`, given it when it has none: the first of its source cluster without its source stream."""
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
        self.links.setdefault(lane, set()).add(link.name)
        return lane

    def route(self, lane: str, topic: str, link_name: str) -> None:
        """The lane's records of source `topic` are `link_name`'s."""
        self.routes.setdefault(lane, {})[topic] = link_name

    def release(self, link_name: str) -> None:
        """The link left the plan: its lane is free for another link of its source stream, and is dropped when it
        reads no other link."""
        lane = self.of.pop(link_name, None)
        self._stream.pop(link_name, None)
        if lane is None:
            return
        names = self.links.get(lane, set())
        names.discard(link_name)
        routes = self.routes.get(lane, {})
        for topic in [t for t, name in routes.items() if name == link_name]:
            del routes[topic]
        if not names:
            self.links.pop(lane, None)
            self.routes.pop(lane, None)
