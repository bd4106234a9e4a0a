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
