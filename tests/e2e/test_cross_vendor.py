"""Replication across vendors, both ways: the migration case (Tansu to noida-db, and back). Records compared one by
one: offset, key, value, headers, timestamp."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.streams import Gateways, link, new_stream, new_topics, produce, same_ends, sp, tally, uuid_of, wait_until

from streamrepl.local import EphemeralClusters


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    # Brokers of its own: one of each kind, in one registry.
    with (
        EphemeralClusters(["sanfrancisco"], broker="tansu") as tansu,
        EphemeralClusters(["newyork"], broker="noida") as noida,
    ):
        bootstrap = {
            "sanfrancisco": tansu.brokers["sanfrancisco"].bootstrap,
            "newyork": noida.brokers["newyork"].bootstrap,
        }
        path = tmp_path_factory.mktemp("reg") / "clusters.yaml"
        doc = {
            "default": "sanfrancisco",
            "clusters": {
                # As a user writes it: what each broker does is probed, not named.
                "sanfrancisco": {"bootstrap.servers": bootstrap["sanfrancisco"]},
                "newyork": {"bootstrap.servers": bootstrap["newyork"]},
            },
        }
        path.write_text(yaml.safe_dump(doc))
        yield path, bootstrap


@pytest.mark.parametrize(("src_cluster", "dst_cluster"), [("sanfrancisco", "newyork"), ("newyork", "sanfrancisco")])
def test_replication_across_vendors_is_exact(
    registry: tuple[Path, dict[str, str]], tmp_path: Path, src_cluster: str, dst_cluster: str
) -> None:
    reg, bootstrap = registry
    name = f"mig{src_cluster[:2]}"
    src = new_stream(reg, f"/{src_cluster}/{name}")
    dst = new_stream(reg, f"/{dst_cluster}/{name}", copyfrom=src)
    topics = {"orders": 3, "refunds": 1}
    new_topics(reg, src, topics)
    produce(bootstrap[src_cluster], sp(src), "orders", 600, 3)
    link(reg, src, dst)
    with Gateways(reg, dst_cluster, tmp_path) as gws:
        gws.start()
        produce(bootstrap[src_cluster], sp(src), "orders", 300, 3, start=600)
        produce(bootstrap[src_cluster], sp(src), "refunds", 100, 1)
        wait_until(
            lambda: same_ends(bootstrap[src_cluster], sp(src), bootstrap[dst_cluster], sp(dst), topics),
            120,
            f"{dst} to catch up with {src}",
        )
    t = tally(bootstrap[src_cluster], sp(src), uuid_of(reg, src), bootstrap[dst_cluster], sp(dst), topics)
    assert t.ok, t
    assert t.records == 1000
