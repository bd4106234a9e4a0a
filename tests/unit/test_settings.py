"""The gateway's tuning variables: a bad value is a one-line error at start, not a traceback or a gateway
that silently loses its protection against writing after a takeover."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import Run, one_error_line, run_proc


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"STREAMREPL_GATEWAY_SESSION_MS": "6s"}, "STREAMREPL_GATEWAY_SESSION_MS=6s is not a whole number"),
        ({"STREAMREPL_GATEWAY_LINGER_MS": "-1"}, "STREAMREPL_GATEWAY_LINGER_MS=-1 must be between 0 and"),
        ({"STREAMREPL_THROTTLE_RATE": "fast"}, "STREAMREPL_THROTTLE_RATE=fast is not a number"),
        (
            {"STREAMREPL_GATEWAY_SESSION_MS": "6000", "STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS": "6000"},
            "STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS (6000) must be shorter than the session",
        ),
        (
            {"STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS": "0"},
            "STREAMREPL_GATEWAY_MESSAGE_TIMEOUT_MS=0 must be between 1 and",
        ),
        ({"STREAMREPL_THROTTLE_RATE": "nan"}, "STREAMREPL_THROTTLE_RATE=nan must be a finite number"),
        ({"STREAMREPL_THROTTLE_RATE": "inf"}, "STREAMREPL_THROTTLE_RATE=inf must be a finite number"),
        ({"STREAMREPL_CURSOR_SYNC_SECONDS": "-1"}, "STREAMREPL_CURSOR_SYNC_SECONDS=-1 must be between 0.05 and"),
        ({"STREAMREPL_CURSOR_SYNC_SECONDS": "nan"}, "STREAMREPL_CURSOR_SYNC_SECONDS=nan must be a finite number"),
        ({"STREAMREPL_CURSOR_SYNC_SECONDS": "abc"}, "STREAMREPL_CURSOR_SYNC_SECONDS=abc is not a number"),
        ({"STREAMREPL_QUIET_END_CHECK_MS": "5"}, "STREAMREPL_QUIET_END_CHECK_MS=5 must be between 10 and"),
        (
            {"STREAMREPL_GATEWAY_SESSION_MS": "99999999999"},
            "STREAMREPL_GATEWAY_SESSION_MS=99999999999 must be between 1000 and",
        ),
    ],
)
def test_bad_gateway_settings_are_one_line_errors(env: dict[str, str], says: str, tmp_path: Path) -> None:
    reg = tmp_path / "clusters.yaml"
    reg.write_text("default: newyork\nclusters:\n  newyork:\n    bootstrap.servers: 127.0.0.1:1\n")
    r = run_proc(["gateway", "start", "-cluster", "newyork"], env={"STREAMREPL_CLUSTERS": str(reg), **env}, timeout=30)
    line = one_error_line(Run(r.returncode, r.stdout, r.stderr))
    assert line.startswith("ERROR (22) - gateway start: "), line
    assert says in line, line
