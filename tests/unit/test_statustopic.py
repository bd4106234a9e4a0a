"""What `replica list` reads from the gateways' reports: which replica partitions a live gateway holds."""

from __future__ import annotations

import time

from streamrepl.paths import StreamPath
from streamrepl.replication.links import Unit
from streamrepl.statustopic import LIVE_SECONDS, unheld


def test_only_a_live_gateway_holds_its_units() -> None:
    now = time.time() * 1000
    units = [Unit(StreamPath("ny", "/s"), "t", p).key for p in range(4)]
    assert units[0] == "/ny/s:t[0]"  # the form gateways report (replication/reports.py)
    gateways = {
        "gateway|live": {"gateway": "live", "units": [units[0]], "updated": now},
        "gateway|silent": {"gateway": "silent", "units": [units[1]], "updated": now - (LIVE_SECONDS + 5) * 1000},
        "gateway|stopped": {"gateway": "stopped", "stopped": True, "units": [units[2]], "updated": now},
    }
    assert unheld(gateways, units) == units[1:]
    assert unheld(gateways, units[:1]) == []
    assert unheld({}, units) == units


def test_a_missing_upstream_found_before_the_stream_was_made_again_is_not_reported() -> None:
    """The source's cluster came back empty and the stream was made again: a gateway that has not re-read the
    metadata since still lists "does not exist"; replica list, which has just read the stream, does not repeat it."""
    from streamrepl import status

    now = int(time.time() * 1000)
    problem = "upstream /sf/a of /ny/a does not exist"
    stale = {"gateway": "ny-gw1", "updated": now, "planned": now - 5000, "problems": [problem]}
    assert status._source_unread({"g": stale}, "/sf/a", "/ny/a", created=now - 1000) == ""
    fresh = dict(stale, planned=now)
    assert "ny-gw1 cannot read the source" in status._source_unread({"g": fresh}, "/sf/a", "/ny/a", created=now - 1000)
    unreachable = dict(stale, problems=["upstream /sf/a of /ny/a: cluster 'sf' does not answer"])
    assert "cannot read" in status._source_unread({"g": unreachable}, "/sf/a", "/ny/a", created=now - 1000)
