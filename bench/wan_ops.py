"""Benchmark: what a round trip to the source costs a gateway's start and a takeover (issue 28, beside bench/wan.py).

Run:  PYTHONPATH=$PWD .venv/bin/python bench/wan_ops.py [--rtts 0,50] [--what acquire,produce,cursors,takeover]
                                                        [--broker tansu|noida] [--front advertise|proxy]
                                                        [--partitions 800] [--reps 2] [--json out.json]

Through bench/wan.py's delay line (the source behind it, the destination and the gateways on loopback), each round
trip with fresh brokers:

  acquire   one source stream of 4 topics (PARTITIONS / 4 partitions each, 800 in all by default) replicated (not
            paused) into a replica stream; with the round trip set, one gateway starts; seconds from its start to
            every replica partition acquired (its log's "acquired" lines, as bench/scale.py counts them), and to its
            slots (the group, on the destination: no round trip of the line in it). Target (issue 28): at 50 ms
            within 2x the 0 ms time plus ten round trips.
  produce   bench/run.py's produce_latency: streamrepl's StreamProducer sends one record at a time (each waits for
            its acknowledgement) into a stream with an asynchronous replica and one with a synchronous replica, one
            gateway for both, 200 records each. The producer runs here, on the gateway's side of the line (the source
            advertises the line's address: every client of it crosses the line): a send waits for the source's
            acknowledgement (one round trip) and, for the synchronous replica, for the replica's end (read on
            loopback) to pass the record, which the gateway's fetch held at the source brings half a round trip
            after the record is written. Target: p50 within two round trips + 15 ms.
            With --producer source (--front proxy): the producer is on the source's side instead, given the
            broker's own address, and reads the replica across a second delay line (and proxy) of the same round
            trip in front of the destination; the gateway still writes the destination directly.
  cursors   a consumer group on the source's side commits offsets of a replicated partition one at a time; ms until
            the replica's group has each (wan_ops.cursors), for each cursor-sync period in --periods.
  takeover  bench/handoff.py's run: two gateways replicate one topic of 4 partitions while 1,000 records/s are
            written; the owner of partition 0 gets SIGKILL; seconds until the other gateway writes partition 0
            (every record compared at the end). Target: its time at 0 ms plus five round trips.

The idempotent C relay is not run here: neither figure is a rate; each is read against the same setup at 0 ms.
Not a pytest test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import handoff  # noqa: E402
import run as bench  # noqa: E402
import scale  # noqa: E402
import wan  # noqa: E402
from provenance import provenance  # noqa: E402


def acquire(logdir: Path, line: wan.DelayLine, rtt: float, partitions: int, rep: int) -> dict:
    name = f"acq{rep}"
    src, dst = f"/{bench.SRC}/{name}", f"/{bench.DST}/{name}"
    per_topic = partitions // 4
    bench.cli("stream", "create", "-path", src, "-defaultpartitions", str(per_topic))
    for t in range(4):
        bench.cli("stream", "topic", "create", "-path", src, "-topic", f"t{t}")
    bench.cli("stream", "create", "-path", dst, "-copymetafrom", src)
    bench.cli("stream", "replica", "add", "-path", src, "-replica", dst)
    bench.cli("stream", "upstream", "add", "-path", dst, "-upstream", src)
    # The replica topics made first (a gateway that starts makes the missing ones), so that the figure is the
    # acquisition alone, the same at every round trip.
    for t in range(4):
        bench.cli("stream", "topic", "create", "-path", dst, "-topic", f"t{t}")
    line.set(rtt)
    gw_name = f"{name}-rtt{rtt:g}".replace(".", "_")
    t0 = time.monotonic()
    gw = subprocess.Popen(
        [
            bench.PY,
            "-m",
            "streamrepl",
            "gateway",
            "start",
            "-cluster",
            bench.DST,
            "-id",
            gw_name,
            "-supervise",
            "false",
        ],
        stdout=open(logdir / f"{gw_name}.log", "a"),  # noqa: SIM115 - lives as long as the process
        stderr=subprocess.STDOUT,
        env=os.environ,
    )
    try:
        slots_s = bench.slots_settled(logdir, [gw_name], timeout=120)
        acquired_s = scale.wait_acquired(logdir, [gw_name], partitions, t0, 300)
    finally:
        bench.stop_gateways([gw])
        line.set(0)
        bench.cli("stream", "replica", "remove", "-path", src, "-replica", dst, check=False)
    # The first gateway on a fresh destination probes its brokers first (about 5 s; discovery.py): round 1 holds it.
    return {
        "slots_s": round(slots_s, 3),
        "acquired_s": round(acquired_s, 3),
        "after_slots_s": round(acquired_s - slots_s, 3),
    }


def takeover(logdir: Path, b: wan.Behind, rtt: float, rep: int) -> dict:
    # handoff.one_run reads the clusters of an EphemeralClusters: the same, for the source behind the line. Its writer,
    # its ends and its compare of every record use the source broker's own address where there is one (front
    # "proxy": on the source's side, as a producer there would be); the gateways read it across the line.
    near = b.source_local or b.source
    reg = logdir / f"handoff-rtt{rtt:g}.yaml"
    reg.write_text(wan.registry_text({bench.SRC: near, bench.DST: b.dest}))
    shim = SimpleNamespace(
        brokers={bench.SRC: SimpleNamespace(bootstrap=near), bench.DST: SimpleNamespace(bootstrap=b.dest)},
        registry_path=reg,
    )
    b.line.set(rtt)
    try:
        return handoff.one_run(shim, logdir, f"ko{rep}rtt{rtt:g}".replace(".", "_"), signal.SIGKILL, 1000)  # type: ignore[arg-type]
    finally:
        b.line.set(0)


def produce(logdir: Path, b: wan.Behind, rtt: float, n: int, side: str) -> dict:
    """`side` "gateway": the producer uses the gateway's registry (the source across the line, the destination
    direct). "source": the producer is on the source's side: the source direct (the broker's own address, front
    "proxy" only) and the destination across a second delay line of the same round trip, with a proxy of its own in
    front (the gateway still reaches the destination directly)."""
    from streamrepl import registry

    # A directory of its own at each round trip: produce_latency's gateway has the same name every time, and
    # slots_settled, reading the log of the round before, let the sends start before this round's gateway had
    # started (it probes the fresh destination first, ~6 s).
    logdir = logdir / f"produce-rtt{rtt:g}"
    logdir.mkdir(parents=True, exist_ok=True)
    if side == "gateway":
        b.line.set(rtt)
        try:
            return bench.produce_latency(logdir, n)
        finally:
            b.line.set(0)
    if b.source_local is None:
        raise RuntimeError("a producer on the source's side needs --front proxy (the broker's own address)")
    with wan.line_in_front(b.dest, logdir, f"dest-rtt{rtt:g}") as (dline, daddr):
        path = logdir / f"producer-rtt{rtt:g}.yaml"
        path.write_text(wan.registry_text({bench.SRC: b.source_local, bench.DST: daddr}))
        reg = registry.load(str(path))
        b.line.set(rtt)
        dline.set(rtt)
        try:
            return bench.produce_latency(logdir, n, reg)
        finally:
            b.line.set(0)
            dline.set(0)


def cursors(logdir: Path, b: wan.Behind, rtt: float, commits: int, period: float, seed: int) -> dict:
    """A consumer group on the source's side of the line (the broker's own address with front "proxy", else across
    the line) commits offsets 1..COMMITS of a replicated topic's partition 0, one at a time, each after a random
    pause of up to one cursor-sync period (so that commits fall at every phase of the sync's rounds); seconds from
    the commit's acknowledgement until the replica's group (on the destination, asked every 10 ms) has it. One
    gateway whose cursor sync runs every `period` seconds (STREAMREPL_CURSOR_SYNC_SECONDS)."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from streamrepl.paths import StreamPath, kafka_topic_name

    name = f"cur{period:g}rtt{rtt:g}r{seed}".replace(".", "_")
    src, dst = bench.new_link(name, ["t"], False, partitions=1)
    topic = kafka_topic_name(StreamPath(bench.SRC, f"/{name}"), "t")  # the same name on both clusters
    near = b.source_local or b.source
    bench.fill(near, topic, commits + 10, partitions=1)
    os.environ["STREAMREPL_CURSOR_SYNC_SECONDS"] = str(period)
    try:
        gw = bench.start_gateway(logdir, name, "-supervise", "false")
    finally:
        del os.environ["STREAMREPL_CURSOR_SYNC_SECONDS"]
    group = f"g.{name}"
    committer = Consumer({"bootstrap.servers": near, "group.id": group, "enable.auto.commit": False})
    admin = AdminClient({"bootstrap.servers": b.dest})
    rng = random.Random(seed)
    lags: list[float | None] = []
    try:
        bench.slots_settled(logdir, [name])
        c = Consumer({"bootstrap.servers": b.dest, "group.id": f"count-{name}"})
        deadline = time.monotonic() + 120
        while bench.count(b.dest, topic, c) < commits + 10:  # the cursor never passes what the replica holds
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica of {topic} did not fill")
            time.sleep(0.2)
        c.close()
        b.line.set(rtt)
        for i in range(1, commits + 1):
            time.sleep(rng.uniform(0, period))
            committer.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
            t0 = time.monotonic()
            lag = None
            while time.monotonic() - t0 < 30:
                want = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
                got = admin.list_consumer_group_offsets([want])[group].result(10).topic_partitions[0].offset
                if got >= i:
                    lag = time.monotonic() - t0
                    break
                time.sleep(0.01)
            lags.append(lag)
    finally:
        b.line.set(0)
        committer.close()
        bench.stop_gateways([gw])
        bench.cli("stream", "replica", "remove", "-path", src, "-replica", dst, check=False)
    return {"period_s": period, **lag_summary(lags)}


def lag_summary(lags: list[float | None]) -> dict:
    """p50, p99 and max in ms of the lags that arrived (the nearest rank), and how many did not arrive."""
    got = sorted(x for x in lags if x is not None)
    if not got:
        return {"commits": len(lags), "missing": len(lags)}

    def rank(q: float) -> float:
        return round(got[min(len(got) - 1, int(q * len(got)))] * 1000, 1)

    return {
        "commits": len(lags),
        "missing": len(lags) - len(got),
        "p50_ms": rank(0.5),
        "p99_ms": rank(0.99),
        "max_ms": round(got[-1] * 1000, 1),
        "mean_ms": round(sum(got) / len(got) * 1000, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtts", default="0,50")
    ap.add_argument("--what", default="acquire,takeover")
    ap.add_argument("--partitions", type=int, default=800)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--broker", choices=wan.BROKERS, default="tansu")
    ap.add_argument("--front", choices=wan.FRONTS, default=None, help="as bench/wan.py's (noida-db: proxy only)")
    ap.add_argument(
        "--producer",
        choices=("gateway", "source"),
        default="gateway",
        help="produce: the producer's side of the line (source: needs --front proxy)",
    )
    ap.add_argument("--commits", type=int, default=50, help="cursors: commits timed at each round trip and period")
    ap.add_argument(
        "--periods", default="2", help="cursors: the gateway's cursor-sync periods, s (comma-separated; 2 the default)"
    )
    ap.add_argument("--note", default="", help="about the machine, kept in the JSON")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    a.front = a.front or ("proxy" if a.broker == "noida" or a.producer == "source" else "advertise")
    rtts = [float(x) for x in a.rtts.split(",") if x]
    what = a.what.split(",")
    res: dict = {**provenance(a.note), "started": time.time(), "partitions": a.partitions, "rows": []}
    res.update(broker=a.broker, front=a.front, producer=a.producer)
    logdir = Path(tempfile.mkdtemp(prefix="streamrepl-wanops-"))
    res["logs"] = str(logdir)
    for rtt in rtts:
        with wan.clusters_behind_line(logdir / f"rtt{rtt:g}", {}, a.broker, a.front) as b:
            line = b.line
            for rep in range(a.reps):
                row: dict = {"rtt_ms": rtt, "rep": rep + 1, "load": os.getloadavg()[0]}
                if "acquire" in what:
                    bench.log(f"rtt {rtt:g} ms, round {rep + 1}: {a.partitions} partitions acquired")
                    try:
                        row["acquire"] = acquire(logdir, line, rtt, a.partitions, rep)
                    except RuntimeError as e:
                        row["acquire"] = {"error": str(e)[:300]}
                if "produce" in what and rep == 0:  # its streams have fixed names: once per round trip
                    bench.log(f"rtt {rtt:g} ms: produce acknowledgements")
                    try:
                        row["produce"] = produce(logdir, b, rtt, 200, a.producer)
                    except RuntimeError as e:
                        row["produce"] = {"error": str(e)[:300]}
                if "cursors" in what:
                    row["cursors"] = []
                    for period in [float(x) for x in a.periods.split(",") if x]:
                        bench.log(f"rtt {rtt:g} ms, round {rep + 1}: cursors, sync every {period:g} s")
                        try:
                            row["cursors"].append(cursors(logdir, b, rtt, a.commits, period, rep))
                        except RuntimeError as e:
                            row["cursors"].append({"period_s": period, "error": str(e)[:300]})
                if "takeover" in what:
                    bench.log(f"rtt {rtt:g} ms, round {rep + 1}: takeover after SIGKILL")
                    try:
                        row["takeover"] = takeover(logdir, b, rtt, rep)
                    except RuntimeError as e:
                        row["takeover"] = {"error": str(e)[:300]}
                row["load_after"] = os.getloadavg()[0]
                bench.log(json.dumps(row))
                res["rows"].append(row)
    res["seconds"] = round(time.time() - res["started"])
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
