"""The environment of an end-to-end module that starts brokers of its own (`Env`, made by `own_env`): the brokers, their
registry, a folder for its gateways' logs, and the names a test needs of them (bootstrap servers, Kafka topic names,
stream uuids). tests/e2e/conftest.py's `env` fixture is the common case (sanfrancisco and newyork); a module that needs
other clusters or a given broker overrides `env` with `own_env(...)`, and says why at its fixture."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path

import pytest

from streamrepl import stream_ops, streams, topics
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name
from streamrepl.registry import Registry, load
from support.streams import sp


class Env:
    def __init__(self, ec: EphemeralClusters, logdir: Path) -> None:
        self.ec = ec
        self.reg: Path = ec.registry_path
        self.logdir = logdir
        #: brokers a test started again after a SIGKILL (EphemeralClusters stops only the ones it started)
        self.restarted: dict[str, subprocess.Popen] = {}

    @property
    def registry_path(self) -> str:
        return str(self.reg)

    @cached_property
    def registry(self) -> Registry:
        return load(self.reg)

    def bs(self, cluster: str) -> str:
        """The bootstrap servers of `cluster`'s broker."""
        return self.ec.brokers[cluster].bootstrap

    def bs_of(self, path: str) -> str:
        """The bootstrap servers of the cluster of a stream path (`/cluster/name`)."""
        return self.bs(sp(path).cluster)

    def kt(self, path: str, topic: str) -> str:
        """The Kafka topic behind `topic` of the stream `path` (`/cluster/name`)."""
        return kafka_topic_name(sp(path), topic)

    def uuid(self, path: str) -> str:
        return streams.load(self.registry, path)[1].uuid

    def make_stream(self, path: str, topic_names: list[str], partitions: int) -> None:
        stream_ops.create(self.registry, path, {"defaultpartitions": partitions})
        for t in topic_names:
            topics.create(self.registry, path, t)


@contextlib.contextmanager
def own_env(
    tmp_path_factory: pytest.TempPathFactory,
    clusters: Sequence[str] = ("sanfrancisco", "newyork"),
    *,
    broker: str | None = None,
    register: bool = False,
) -> Iterator[Env]:
    """Brokers of a module's own for `clusters`, on `broker` (None: $STREAMREPL_LOCAL_BROKER's, see
    support.clusters.BROKER); with `register`, $STREAMREPL_CLUSTERS names their registry while they run. Brokers a test
    started again (`Env.restarted`) are stopped at the end."""
    with EphemeralClusters(list(clusters), broker=broker) as ec, pytest.MonkeyPatch.context() as mp:
        if register:
            mp.setenv("STREAMREPL_CLUSTERS", str(ec.registry_path))
        env = Env(ec, tmp_path_factory.mktemp("gateways"))
        try:
            yield env
        finally:
            for proc in env.restarted.values():
                proc.terminate()
                proc.wait(30)
