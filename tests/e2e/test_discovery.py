"""Brokers discovered, not declared (discovery.py, kafka/probes.py): on a registry a user writes (bootstrap.servers
only), what each embedded broker does is found by asking it, cached in the cluster with its identity, shown by
`cluster list`, and a registry property overrides only the answer it names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from support import Run
from support.clusters import ON_NOIDA

from streamrepl import discovery, registry
from streamrepl.kafka import brokers
from streamrepl.kafka.probes import BrokerTraits
from streamrepl.local import EphemeralClusters
from streamrepl.settings import clusters_file

pytestmark = pytest.mark.noida_matrix


def _cluster(name: str) -> registry.Cluster:
    path = clusters_file()
    assert path is not None
    return registry.load(str(path)).get(name)


def test_the_probes_find_what_the_embedded_broker_does(clusters: EphemeralClusters) -> None:
    cluster = _cluster("newyork")
    assert "streamrepl.broker" not in cluster.properties, "the tests run on the registry a user writes"
    traits = discovery.discover(cluster, force=True)
    if ON_NOIDA:
        # Exact ends, an empty fetch answered at once, a static member's return honoured.
        assert (traits.exact_watermark, traits.fetch_holds, traits.static_rejoin) == (True, False, True), traits
    else:
        # Tansu: the last batch's base offset + 1, a held fetch that sees a record at its next look, and a
        # rebalance (or no share at all) for a static member.
        assert (traits.exact_watermark, traits.fetch_holds, traits.fetch_wakes) == (False, True, False), traits
        assert traits.static_rejoin is False, traits
    assert brokers.traits_of(cluster) == traits
    assert brokers.watermark_is_exact(cluster) is ON_NOIDA
    assert brokers.honours_static_membership(cluster) is ON_NOIDA
    assert brokers.busy_fetch_wait_ms(cluster) == 10


def test_answers_are_cached_with_the_identity_and_probed_again_when_it_changes(clusters: EphemeralClusters) -> None:
    cluster = _cluster("sanfrancisco")
    first = discovery.discover(cluster)
    assert discovery.cached(cluster) == first
    assert discovery.discover(cluster).probed_at == first.probed_at, "the same identity: the cache answers"
    # Another broker build behind the same address: its identity differs from the cached one.
    discovery._keep(cluster, dataclasses.replace(first, identity="another-cluster/1/abc", exact_watermark=None))
    again = discovery.discover(cluster)
    assert again.identity == first.identity and again.probed_at > first.probed_at
    assert again.exact_watermark == first.exact_watermark


def test_cluster_list_shows_what_was_found_and_where_the_registry_overrides_it(
    clusters: EphemeralClusters, cli: Callable[..., Run], tmp_path: object
) -> None:
    run = cli("cluster", "list", "-probe", "true", "-timeout", "30", "-json")  # a busy machine answers slowly
    assert run.code == 0, run.stderr
    rows = {r["cluster"]: r for r in run.data()}
    found = rows["newyork"]["brokers"]
    probes = rows["newyork"]["probes"]
    assert probes["exact_watermark"] is ON_NOIDA and probes["identity"] and probes["overrides"] == {}, probes
    assert f"watermark={'exact' if ON_NOIDA else 'short'}" in found, found
    assert "leave=" in found and "unknown" not in found.split("leave=")[1], "-probe waits for the LeaveGroup probe"
    # A property that contradicts a probe overrides it, and cluster list says so.
    cluster = _cluster("newyork")
    wrong = "false" if ON_NOIDA else "true"
    overridden = registry.Cluster("newyork", {**cluster.properties, "streamrepl.watermark.exact": wrong})
    said = discovery.describe(overridden, discovery.cached(cluster))
    assert f"streamrepl.watermark.exact={wrong} overrides the probe" in said, said
    brokers.learn(overridden, discovery.cached(cluster) or BrokerTraits())
    assert brokers.watermark_is_exact(overridden) is (wrong == "true")
