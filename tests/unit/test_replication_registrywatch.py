"""A running gateway notices that the registry moved a cluster it uses (replication/registrywatch.py). No broker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamrepl import registry
from streamrepl.replication.registrywatch import CHECK_SECONDS, RegistryChanged, RegistryWatch

DOC = "default: ny\nclusters:\n  ny:\n    bootstrap.servers: 127.0.0.1:{ny}\n  sf:\n    bootstrap.servers: 127.0.0.1:{sf}\n"


def _write(path: Path, ny: int, sf: int, mtime: float) -> None:
    path.write_text(DOC.format(ny=ny, sf=sf))
    os.utime(path, (mtime, mtime))


def test_a_moved_cluster_in_use_stops_the_gateway_and_others_do_not(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    _write(path, 1, 2, 1000)
    now = [0.0]
    watch = RegistryWatch(registry.load(str(path)), clock=lambda: now[0])
    watch.check(["ny"])  # nothing changed, and not due yet
    _write(path, 1, 3, 2000)  # sf moved: this gateway reads only from ny
    now[0] += CHECK_SECONDS
    watch.check(["ny"])
    _write(path, 4, 3, 3000)  # ny moved
    watch.check(["ny"])  # not due yet: the file is looked at every few seconds
    now[0] += CHECK_SECONDS
    with pytest.raises(RegistryChanged, match="changed the settings of cluster ny"):
        watch.check(["ny", "sf"])


def test_a_registry_that_no_longer_parses_keeps_the_running_settings(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    _write(path, 1, 2, 1000)
    now = [0.0]
    watch = RegistryWatch(registry.load(str(path)), clock=lambda: now[0])
    path.write_text("clusters: [\n")
    os.utime(path, (2000, 2000))
    now[0] += CHECK_SECONDS
    watch.check(["ny"])  # logged, not raised
