"""Names streamrepl refuses before it does anything, each with one line saying why: topics named `.` or `..`, over-long paths, gateway ids outside letters, digits, dot, underscore and dash, cluster names the registry refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import one_error_line, run_cli, run_proc

from streamrepl.errors import InvalidArgument
from streamrepl.paths import parse_stream, validate_topic


@pytest.mark.parametrize("topic", [".", ".."])
def test_topics_named_dot_or_dot_dot_are_refused(topic: str) -> None:
    with pytest.raises(InvalidArgument, match="'.'"):
        validate_topic(topic)


def test_a_very_long_path_gives_a_short_error_line() -> None:
    raw = "/" + "x" * 10_000
    with pytest.raises(InvalidArgument) as e:
        parse_stream(raw, {"a"}, "a")
    assert len(str(e.value)) < 500
    assert "characters)" in str(e.value)


# -- 4. gateway ids --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gateway_id", ["bad\nid", "with space", "slash/id", "", "é"])
def test_gateway_start_refuses_an_id_outside_letters_digits_dot_underscore_dash(
    tmp_path: Path, gateway_id: str
) -> None:
    registry = tmp_path / "clusters.yaml"
    registry.write_text("clusters:\n  newyork:\n    bootstrap.servers: 127.0.0.1:1\n")
    # A process of its own: a gateway that takes the id runs until it is stopped.
    run = run_proc(["gateway", "start", "-cluster", "newyork", "-id", gateway_id, "-clusters", registry], timeout=30)
    line = one_error_line(run)
    assert "-id" in line and "letters, digits" in line, line


# -- 5. local up refuses what the registry would refuse -------------------------------------------------------------
@pytest.mark.parametrize("names", ["mapr", "sanfrancisco,mapr"])
def test_local_up_refuses_a_cluster_the_registry_refuses(tmp_path: Path, names: str) -> None:
    try:
        run = run_cli("local", "up", "-clusters", names, "-dir", str(tmp_path))
    finally:
        run_cli("local", "down", "-dir", str(tmp_path))  # brokers it should not have started
    line = one_error_line(run)
    assert "'mapr'" in line, line
    assert not (tmp_path / "clusters.yaml").exists()
