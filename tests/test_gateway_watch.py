"""The gateway's plan watcher: a change to the stream metadata is applied at once, not at the next full read."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from streamrepl import registry, replicas, stream_ops, topics
from streamrepl.local import EphemeralClusters
from streamrepl.replication import watcher
from streamrepl.replication.gateway import Gateway

pytestmark = pytest.mark.e2e


def test_a_metadata_change_reaches_the_gateway_before_the_next_full_read(
    clusters: EphemeralClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = registry.load(str(clusters.registry_path))
    name = f"watch{uuid.uuid4().hex[:6]}"
    sf, ny = f"/sanfrancisco/{name}", f"/newyork/{name}"
    stream_ops.create(reg, sf, {"defaultpartitions": 1})
    stream_ops.create(reg, ny, {"defaultpartitions": 1})
    topics.create(reg, sf, "early")
    replicas.add(reg, sf, ny, paused=True)
    replicas.upstream_add(reg, ny, sf)
    # Full reads a minute apart: only the change detection can bring the plan up to date in time.
    monkeypatch.setattr(watcher, "REFRESH_SECONDS", 60.0)
    gw = Gateway(reg, "newyork", f"watch-{uuid.uuid4().hex[:4]}")
    t = threading.Thread(target=gw.run, kwargs={"max_seconds": 90}, daemon=True)
    t.start()

    def planned_topics() -> set[str]:
        published = gw.watcher.published
        if published is None:
            return set()
        return {u.topic for u in published[0].units if str(u.dst) == ny}

    try:
        deadline = time.monotonic() + 30
        while gw.watcher.published is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gw.watcher.published is not None, "the gateway never read the metadata"
        assert planned_topics() == set(), "a paused link is not planned"

        replicas.set_paused(reg, sf, ny, False)
        deadline = time.monotonic() + 10
        while planned_topics() != {"early"} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert planned_topics() == {"early"}, "the resume was not seen before the next full read"

        topics.create(reg, sf, "late")
        deadline = time.monotonic() + 10
        while planned_topics() != {"early", "late"} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert planned_topics() == {"early", "late"}, "the new topic was not seen before the next full read"
    finally:
        gw.stop()
        t.join(30)
