"""What a cluster's brokers do, probed once per broker identity and kept in the cluster itself.

The answers (kafka/probes.py) are cached in the cluster's status topic under TRAITS_KEY with the identity they were
found for; a gateway that starts reads them, and probes again when there are none or the cluster's identity changed
(another broker build, other broker ids). The LeaveGroup probe, which takes a few group sessions and is only needed
when a gateway stops, runs after the gateway started (`probe_leave_later`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from . import kafka, statustopic
from .errors import StreamreplError
from .kafka import brokers, probes
from .kafka.probes import BrokerTraits
from .registry import Cluster

log = logging.getLogger("streamrepl.discovery")

TRAITS_KEY = "traits|brokers"


def cached(cluster: Cluster) -> BrokerTraits | None:
    """The answers kept in `cluster`, whatever identity they were found for; None: never probed."""
    found = statustopic.read(cluster, TRAITS_KEY).get(TRAITS_KEY)
    return BrokerTraits.from_json(json.dumps(found)) if found else None


def _keep(cluster: Cluster, traits: BrokerTraits) -> None:
    """The answers hold for this process whether or not they could be kept: one not kept is probed again next time."""
    try:
        statustopic.put(cluster, TRAITS_KEY, traits.to_json().encode(), "keeping what its brokers do")
    except (StreamreplError, kafka.KafkaException) as e:
        log.warning("cluster %s: what its brokers do was not kept (%s); it is probed again next time", cluster.name, e)


_asked: set[tuple[str, str]] = set()
_asked_lock = threading.Lock()


def learn_cached(cluster: Cluster) -> None:
    """Learn the answers cached in `cluster` (a source cluster, which the gateway does not probe itself: its own
    gateways do) when they are for its identity. Once per cluster and process, in a thread: the caller (a source
    consumer being made) goes on with what is known now, the safe branch until then, and is never held up by a
    source that does not answer."""
    key = (cluster.name, cluster.properties.get("bootstrap.servers", ""))
    with _asked_lock:
        if key in _asked or brokers.traits_of(cluster).probed_at:
            return
        _asked.add(key)

    def run() -> None:
        try:
            known = cached(cluster)
            if known is not None and known.identity == probes.identity(cluster):
                brokers.learn(cluster, known)
        except (StreamreplError, kafka.KafkaException, OSError, TimeoutError) as e:
            log.debug("cluster %s: no cached broker answers (%s)", cluster.name, e)

    threading.Thread(target=run, name=f"learn-{cluster.name}", daemon=True).start()


def discover(cluster: Cluster, force: bool = False) -> BrokerTraits:
    """The cluster's answers for this process: the cached ones when they are for the identity the cluster has now,
    else (or with `force`) probed and kept. The LeaveGroup answer of a new probe is left unknown until
    probe_leave_later finds it (`cluster list -probe true` waits for it)."""
    identity = probes.identity(cluster)
    known = cached(cluster)
    if known is not None and known.identity == identity and not force:
        brokers.learn(cluster, known)
        return known
    log.info("cluster %s: probing what its brokers do (identity %s)", cluster.name, identity)
    tp = probes.probe_partition(cluster)
    with ThreadPoolExecutor(max_workers=3) as pool:
        watermark = pool.submit(probes.attempt, probes.probe_watermark, cluster, tp)
        fetch = pool.submit(probes.attempt, probes.probe_fetch, cluster, tp)
        static = pool.submit(probes.attempt, probes.run_isolated, "static_rejoin", cluster)
        notes: dict[str, str] = {}
        results = {}
        for name, fut in (("exact_watermark", watermark), ("fetch", fetch), ("static_rejoin", static)):
            value, note = fut.result()
            results[name] = value
            if note:
                notes[name] = note
    holds, wakes = results["fetch"] if results["fetch"] is not None else (None, None)
    traits = BrokerTraits(
        identity=identity,
        exact_watermark=results["exact_watermark"],
        fetch_holds=holds,
        fetch_wakes=wakes,
        static_rejoin=results["static_rejoin"],
        probed_at=probes.now_ms(),
        notes=notes,
    )
    log.info("cluster %s: %s", cluster.name, describe(cluster, traits))
    _keep(cluster, traits)
    brokers.learn(cluster, traits)
    return traits


def for_gateway(cluster: Cluster) -> bool:
    """What a starting gateway needs: the answers for `cluster`, cached or probed, then the LeaveGroup probe in a
    thread where it is unknown. False when the brokers could not be probed: the safe branch is taken everywhere."""
    try:
        traits = discover(cluster)
    except (StreamreplError, kafka.KafkaException, OSError, TimeoutError) as e:
        log.warning(
            "cluster %s: its brokers could not be probed (%s); taking what is safe on every broker", cluster.name, e
        )
        return False
    probe_leave_later(cluster, traits)
    return True


def probe_leave_later(cluster: Cluster, traits: BrokerTraits) -> threading.Thread | None:
    """When the LeaveGroup answer is unknown, find it in a thread of its own, then keep and learn it."""
    if traits.clean_leave is not None:
        return None

    def run() -> None:
        value, note = probes.attempt(probes.run_isolated, "clean_leave", cluster)
        notes = dict(traits.notes, **({"clean_leave": note} if note else {}))
        done = dataclasses.replace(traits, clean_leave=value, notes=notes)
        _keep(cluster, done)
        brokers.learn(cluster, done)
        log.info("cluster %s: LeaveGroup during a rebalance %s", cluster.name, _word(value, "hands over", "wedges"))

    t = threading.Thread(target=run, name=f"probe-leave-{cluster.name}", daemon=True)
    t.start()
    return t


def _word(value: bool | None, yes: str, no: str) -> str:
    return "unknown" if value is None else (yes if value else no)


def describe(cluster: Cluster, traits: BrokerTraits | None) -> str:
    """One line of what was found, and where the registry overrides it ("property=value, probe found ...")."""
    if traits is None or not traits.probed_at:
        found = "not probed yet (a gateway probes at its first start)"
    else:
        found = " ".join(
            [
                f"watermark={_word(traits.exact_watermark, 'exact', 'short')}",
                f"fetchwait={_word(traits.fetch_holds, 'held', 'ignored')}"
                + ("" if not traits.fetch_holds else f"/{_word(traits.fetch_wakes, 'woken', 'late')}"),
                f"static={_word(traits.static_rejoin, 'honoured', 'rebalances')}",
                f"leave={_word(traits.clean_leave, 'clean', 'wedges')}",
            ]
        )
    over = brokers.overridden(cluster)
    clashes = []
    if traits is not None:
        answers = traits.answers()
        for name, value in sorted(over.items()):
            if answers.get(name) is not None and answers[name] != value:
                prop = next(p for p, a in brokers.OVERRIDES.items() if a == name)
                clashes.append(f"{prop}={str(value).lower()} overrides the probe ({name}={answers[name]})")
    return found + ("; " + "; ".join(clashes) if clashes else "")
