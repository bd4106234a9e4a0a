"""Probe: the gateway against the idempotent C relay, both clocked by an observer outside them (issue 33).

Run:  .venv/bin/python bench/probes/outside.py [--records 1000000] [--sizes 100,1024] [--partitions 4] [--rounds 2]
                                              [--json bench/probes/results/outside.json] [--note "..."]

An independent check of bench/run.py's throughput ratios that shares none of its timing code: run.py is not imported
(bench/data.py makes the records, bench/relay.c's binary is the relay, the product's CLI sets up the streams and
starts the gateways). For each size, on two embedded clusters of its own (streamrepl.local.EphemeralClusters):

- a stream with one topic of --partitions partitions is made on the source and its Kafka topic filled with N of
  bench/data.py's records by a plain confluent-kafka producer (lz4, librdkafka's defaults otherwise), round-robin over
  the partitions; the source's real ends are read back. All of it before any clock starts. Both copiers read this
  same topic: the relay as a plain Kafka topic, the gateway as the stream's topic.
- each round, in turn (the order alternates from round to round), into destinations made fresh for the round:
  (a) relay: `bench/.build/relay` with `p.enable.idempotence=true` (no RELAY_WAIT), copying into a plain topic made
      on the destination; its clock starts as its process is started.
  (b) gateway: a replica stream made with the CLI (`stream create -copymetafrom`, `stream replica add` not paused,
      `stream upstream add`, `stream topic create`) while no gateway runs; its clock starts as `streamrepl gateway
      start` is started. A thread runs `streamrepl cluster gateway list -json` every --slots-poll seconds until the
      gateway reports all 64 slots: the second clock starts there (the gateway reports itself every 5 s, so that
      moment is late by up to that much; the rate after it counts only the records that landed after it).
- the end of both clocks: an observer *process* (this file with --observe) with its own clients polls the
  destination every --poll-ms: the high watermarks of all partitions in one ListOffsets request (AdminClient
  list_offsets), and, for a partition within a batch of its end (or stalled), its last batch read with a consumer
  from the watermark - 1 (Tansu's high watermark is the base offset of the last batch + 1, not the end). It prints
  CLOCK_MONOTONIC (shared by all processes) of the first poll that finds every partition's end equal to the source's.
- after the gateway's round, a sample of the replica (the first, middle and last --sample records of each partition)
  is compared with the source: offset, key, value, timestamp and headers. The replica's records carry one header
  more, `streamrepl.origin` (the relay adds the same): counted, not a failure. The relay's copy is checked alike.

Prints a table (records/s from each copier's start, from the gateway's slots, and after each one's first record seen;
the ratios gateway / relay) and writes --json with bench/provenance.py's fields.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))  # bench/: data.py, provenance.py
from data import COMPRESSION, Records  # noqa: E402
from provenance import provenance  # noqa: E402

SRC, DST = "sanfrancisco", "newyork"
RELAY = BENCH / ".build" / "relay"  # bench/relay.c, built by bench/setup
ORIGIN = "00000000-0000-4000-8000-0000000000c0"  # the relay's origin header value: as long as a stream's uuid
ORIGIN_HEADER = "streamrepl.origin"
SLOTS = 64  # the slots the gateways of a destination cluster share
TAIL = 50_000  # within this many records of its end, a partition's last batch is read at each poll


def say(msg: str) -> None:
    print(f"[outside {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def streamrepl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [str(Path(sys.executable).with_name("streamrepl")), *args], capture_output=True, text=True, env=os.environ
    )
    if check and r.returncode:
        raise RuntimeError(f"streamrepl {' '.join(args)}: exit {r.returncode}: {r.stdout}{r.stderr}")
    return r


# ---- the outside observer: its own process, its own clients


class Ends:
    """The real end of each partition of a topic, read from outside: the high watermarks of all partitions in one
    ListOffsets request, and where a watermark may under-count (Tansu), the partition's last batch."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.topic, self.partitions = topic, partitions
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.tail = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"outside-observer-{os.getpid()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 5,
                "auto.offset.reset": "earliest",
            }
        )

    def highs(self) -> list[int]:
        req = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in range(self.partitions)}
        futures = self.admin.list_offsets(req, request_timeout=10)
        return [max(futures[tp].result().offset, 0) for tp in req]

    def read_ends(self, highs: dict[int, int]) -> dict[int, int]:
        """Each partition's end past its watermark: the offset after the last record of the batch the watermark - 1
        lies in (and of any batch after it)."""
        ends = dict(highs)
        want = {p for p, h in highs.items() if h > 0}
        if not want:
            return ends
        self.tail.assign([TopicPartition(self.topic, p, highs[p] - 1) for p in want])
        deadline = time.monotonic() + 5
        while want and time.monotonic() < deadline:
            for m in self.tail.consume(1000, timeout=0.2):
                if m.error() is None:
                    ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    want.discard(m.partition())
        self.tail.unassign()
        return ends

    def true_ends(self) -> list[int]:
        highs = self.highs()
        got = self.read_ends(dict(enumerate(highs)))
        return [got[p] for p in range(self.partitions)]


def observe(bootstrap: str, topic: str, targets: list[int], poll_s: float, timeout: float) -> dict:
    """Poll until every partition's end equals its target; the CLOCK_MONOTONIC of that poll, of the first record
    seen, and the records seen at each poll (the watermarks' sum, or the ends where known)."""
    ends = Ends(bootstrap, topic, len(targets))
    done: dict[int, int] = {}
    last: list[int] = [-1] * len(targets)
    still = [0] * len(targets)
    trace: list[tuple[float, int]] = []
    first = None
    print("ready", flush=True)
    t_stop = time.monotonic() + timeout
    while time.monotonic() < t_stop:
        t_poll = time.monotonic()
        try:
            highs = ends.highs()
        except KafkaException as e:  # a replica topic not yet known to the broker's metadata
            trace.append((t_poll, -1))
            print(json.dumps({"warning": str(e)}), file=sys.stderr, flush=True)
            time.sleep(poll_s)
            continue
        for p, h in enumerate(highs):
            still[p] = still[p] + 1 if h == last[p] else 0
            last[p] = h
        near = {
            p: h
            for p, h in enumerate(highs)
            if p not in done and h > 0 and (h >= targets[p] - TAIL or still[p] >= 3) and h < targets[p]
        }
        for p, h in enumerate(highs):
            if p not in done and h >= targets[p]:
                done[p] = h
        if near:
            for p, e in ends.read_ends(near).items():
                if e >= targets[p]:
                    done[p] = e
        seen = sum(done.get(p, h) for p, h in enumerate(highs))
        t_seen = time.monotonic()
        trace.append((t_seen, seen))
        if first is None and seen > 0:
            first = (t_seen, seen)
        if len(done) == len(targets):
            return {"end": t_seen, "first": first, "ends": [done[p] for p in range(len(targets))], "trace": trace}
        time.sleep(max(0.0, poll_s - (time.monotonic() - t_poll)))
    return {"end": None, "first": first, "ends": last, "trace": trace}


def observer_main(a: argparse.Namespace) -> int:
    bootstrap, topic, targets = a.observe[0], a.observe[1], json.loads(a.observe[2])
    out = observe(bootstrap, topic, targets, a.poll_ms / 1000, a.timeout)
    print(json.dumps(out), flush=True)
    return 0


class Observer:
    """The observer process, started (its clients made) before the copier it clocks."""

    def __init__(self, a: argparse.Namespace, bootstrap: str, topic: str, targets: list[int]):
        argv = [sys.executable, __file__, "--observe", bootstrap, topic, json.dumps(targets)]
        argv += ["--poll-ms", str(a.poll_ms), "--timeout", str(a.timeout)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the observer did not start")

    def result(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.proc.wait(30)
        if not line:
            raise RuntimeError(f"the observer said nothing (exit {self.proc.returncode})")
        return json.loads(line)


# ---- the records, the copies and their check


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures fail once it is collected
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics([topic]).values():
        try:
            f.result(30)
        except KafkaException as e:
            say(f"deleting {topic}: {e}")


def fill(bootstrap: str, topic: str, recs: Records, n: int, partitions: int) -> float:
    """n records, round-robin over the partitions, by a producer with ordinary settings (lz4); seconds taken."""
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": COMPRESSION})
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(
                    topic,
                    recs.value(i),
                    recs.key(i),
                    partition=i % partitions,
                    headers=recs.headers(i),
                    timestamp=recs.timestamp(i),
                )
                break
            except BufferError:
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    if p.flush(180):
        raise RuntimeError(f"records of {topic} not delivered")
    return time.monotonic() - t0


def read_range(bootstrap: str, topic: str, partition: int, start: int, stop: int) -> list[tuple]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"outside-check-{os.getpid()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, partition, start)])
    out: list[tuple] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msgs = c.consume(1000, timeout=0.5)
        for m in msgs:
            if m.error() is None and m.offset() < stop:
                out.append((m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers() or []))
        if (out and out[-1][0] >= stop - 1) or any(
            m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF for m in msgs
        ):
            break
    c.close()
    return out


def check_sample(sb: str, src_topic: str, db: str, dst_topic: str, ends: list[int], sample: int) -> dict:
    """The first, middle and last `sample` records of each partition, source against copy."""
    compared = 0
    wrong = {"offset": 0, "key": 0, "value": 0, "timestamp": 0, "headers": 0, "missing": 0}
    added: dict[str, int] = {}
    first_wrong = None
    for p, end in enumerate(ends):
        for start in sorted({0, max(0, end // 2 - sample // 2), max(0, end - sample)}):
            stop = min(end, start + sample)
            a = read_range(sb, src_topic, p, start, stop)
            b = {r[0]: r for r in read_range(db, dst_topic, p, start, stop)}
            for r in a:
                compared += 1
                c = b.get(r[0])
                if c is None:
                    wrong["missing"] += 1
                    continue
                extra = [h for h in c[4] if h[0] == ORIGIN_HEADER]
                for h in extra:
                    added[h[0]] = added.get(h[0], 0) + 1
                kept = [h for h in c[4] if h[0] != ORIGIN_HEADER]
                for field, x, y in (("key", r[1], c[1]), ("value", r[2], c[2]), ("timestamp", r[3], c[3])):
                    if x != y:
                        wrong[field] += 1
                        first_wrong = first_wrong or f"p{p}@{r[0]} {field}: {x!r:.80} != {y!r:.80}"
                if list(r[4]) != kept:
                    wrong["headers"] += 1
                    first_wrong = first_wrong or f"p{p}@{r[0]} headers: {r[4]!r:.120} != {kept!r:.120}"
    return {
        "compared": compared,
        "wrong": wrong,
        "ok": not any(wrong.values()),
        "added_headers": added,
        "first_wrong": first_wrong,
    }


def rates(n: int, t0: float, obs: dict) -> dict:
    """records/s from t0 to the observer's end, and after the first record seen (start-up apart)."""
    if obs["end"] is None:
        return {"complete": False, "seconds": None, "records_s": None}
    dt = obs["end"] - t0
    out = {"complete": True, "seconds": round(dt, 3), "records_s": round(n / dt)}
    if obs["first"] and obs["end"] > obs["first"][0]:
        t1, got = obs["first"]
        out["first_record_s"] = round(t1 - t0, 3)
        out["after_first_records_s"] = round((n - got) / (obs["end"] - t1))
    return out


def seen_at(trace: list, t: float) -> int:
    """The records the observer had seen at time t (its last poll before t)."""
    got = 0
    for ts, seen in trace:
        if ts > t:
            break
        got = max(got, seen)
    return got


def thin(trace: list, every: float = 0.5) -> list:
    out, last = [], None
    for t, seen in trace:
        if last is None or t - last >= every:
            out.append([round(t, 3), seen])
            last = t
    if trace and out[-1][0] != round(trace[-1][0], 3):
        out.append([round(trace[-1][0], 3), trace[-1][1]])
    return out


def relay_round(a: argparse.Namespace, sb: str, db: str, src_topic: str, n: int, ends: list[int], tag: str) -> dict:
    topic = f"outside.relay{tag}"
    create_topic(db, topic, a.partitions)
    obs = Observer(a, db, topic, ends)
    err = tempfile.TemporaryFile()
    argv = [str(RELAY), sb, db, src_topic, topic, str(a.partitions), str(n), ORIGIN, "p.enable.idempotence=true"]
    load = os.getloadavg()
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    seen = obs.result()
    out, _ = proc.communicate(timeout=120)
    t_exit = time.monotonic()
    row = {"load_at_start": load, **rates(n, t0, seen), "exit_s": round(t_exit - t0, 3)}
    own = out.split()
    row["own_records"], row["own_seconds"] = (int(own[0]), float(own[1])) if len(own) == 2 else (None, None)
    if proc.returncode:
        err.seek(0)
        row["error"] = f"relay exit {proc.returncode}: {err.read().decode(errors='replace').strip()[-300:]}"
    row["trace"] = thin(seen["trace"])
    row["check"] = check_sample(sb, src_topic, db, topic, ends, a.sample)
    delete_topic(db, topic)
    return row


def gateway_list(gid: str) -> tuple[int, int] | None:
    """(slots, partitions) `cluster gateway list` reports for gateway gid (with its workers), or None if absent."""
    r = streamrepl("cluster", "gateway", "list", "-dstcluster", DST, "-json", check=False)
    try:
        rows = json.loads(r.stdout)["data"]
    except (ValueError, KeyError):
        return None
    mine = [x for x in rows if x.get("gateway") == gid or x.get("parent") == gid]
    if not mine:
        return None
    return sum(int(x.get("slots", 0)) for x in mine), sum(int(x.get("partitions", 0)) for x in mine)


def gateway_round(
    a: argparse.Namespace, sb: str, db: str, src: str, src_topic: str, n: int, ends: list[int], tag: str, logdir: Path
) -> dict:
    name = f"o{tag}"
    dst = f"/{DST}/{name}"
    # Set up as a user would, while no gateway runs: the replica stream, the link (not paused), its topic.
    streamrepl("stream", "create", "-path", dst, "-copymetafrom", src)
    streamrepl("stream", "replica", "add", "-path", src, "-replica", dst)
    streamrepl("stream", "upstream", "add", "-path", dst, "-upstream", src)
    streamrepl("stream", "topic", "create", "-path", dst, "-topic", "t")
    topic = f"sr.{name}.t"
    obs = Observer(a, db, topic, ends)
    slots: dict = {}
    stop = threading.Event()

    def watch_slots() -> None:  # the moment `cluster gateway list` shows the gateway holding every slot
        while not stop.is_set():
            t_ask = time.monotonic()
            got = gateway_list(name)
            t_got = time.monotonic()
            if got and got[1] and "partitions_at" not in slots:
                slots["partitions_at"] = t_got
            if got and got[0] >= SLOTS:
                slots.update(at=t_got, asked=t_ask, polls=slots.get("polls", 0) + 1)
                return
            slots["polls"] = slots.get("polls", 0) + 1
            stop.wait(a.slots_poll)

    log = open(logdir / f"{name}.log", "w")  # noqa: SIM115 - lives as long as the gateway
    load = os.getloadavg()
    t0 = time.monotonic()
    gw = subprocess.Popen(
        [str(Path(sys.executable).with_name("streamrepl")), "gateway", "start", "-cluster", DST, "-id", name],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=os.environ,
    )
    watcher = threading.Thread(target=watch_slots, daemon=True)
    watcher.start()
    try:
        seen = obs.result()
    finally:
        stop.set()
        watcher.join(30)
        gw.terminate()
        try:
            gw.wait(60)
        except subprocess.TimeoutExpired:
            gw.kill()
            gw.wait()
        log.close()
    row = {"load_at_start": load, **rates(n, t0, seen), "slot_polls": slots.get("polls", 0)}
    if "at" in slots and seen["end"] is not None:
        t_slots = slots["at"]
        row["slots_seen_s"] = round(t_slots - t0, 3)
        row["slots_asked_s"] = round(slots["asked"] - t0, 3)
        landed = seen_at(seen["trace"], t_slots)
        row["landed_at_slots"] = landed
        if seen["end"] > t_slots and landed < n:
            row["after_slots_records_s"] = round((n - landed) / (seen["end"] - t_slots))
    if "partitions_at" in slots:
        row["partitions_seen_s"] = round(slots["partitions_at"] - t0, 3)
    row["trace"] = thin(seen["trace"])
    row["check"] = check_sample(sb, src_topic, db, topic, ends, a.sample)
    row["log"] = str(logdir / f"{name}.log")
    streamrepl("stream", "replica", "remove", "-path", src, "-replica", dst, check=False)
    streamrepl("stream", "delete", "-path", dst, check=False)
    return row


def size_block(a: argparse.Namespace, size: int, logdir: Path) -> dict:
    from streamrepl.local import EphemeralClusters

    n = a.records
    recs = Records(size)
    block: dict = {"value_bytes": size, "data": recs.about(), "rounds": []}
    with EphemeralClusters([SRC, DST]) as ec:
        os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
        os.environ.pop("STREAMREPL_IDENTITY", None)
        sb, db = ec.brokers[SRC].bootstrap, ec.brokers[DST].bootstrap
        src = f"/{SRC}/o{size}"
        streamrepl("stream", "create", "-path", src, "-defaultpartitions", str(a.partitions))
        streamrepl("stream", "topic", "create", "-path", src, "-topic", "t")
        src_topic = f"sr.o{size}.t"
        say(f"{size} B: {n:,} records into {src_topic}")
        block["fill_s"] = round(fill(sb, src_topic, recs, n, a.partitions), 2)
        probe = Ends(sb, src_topic, a.partitions)
        ends = probe.true_ends()
        probe.tail.close()
        want = [len(range(p, n, a.partitions)) for p in range(a.partitions)]
        if ends != want:
            raise RuntimeError(f"the source holds {ends}, not {want}")
        block["source_ends"] = ends
        for r in range(a.rounds):
            order = ["relay", "gateway"] if r % 2 == 0 else ["gateway", "relay"]
            rnd: dict = {"order": order}
            for which in order:
                tag = f"{size}r{r}"
                say(f"{size} B, round {r + 1}: {which}")
                if which == "relay":
                    rnd["relay"] = relay_round(a, sb, db, src_topic, n, ends, tag)
                else:
                    rnd["gateway"] = gateway_round(a, sb, db, src, src_topic, n, ends, tag, logdir)
                x = rnd[which]
                say(f"  {x.get('records_s')} records/s, check {'ok' if x['check']['ok'] else x['check']}")
            g, c = rnd["gateway"], rnd["relay"]
            for key, gk in (("ratio", "records_s"), ("ratio_after_slots", "after_slots_records_s")):
                if g.get(gk) and c.get("records_s"):
                    rnd[key] = round(g[gk] / c["records_s"], 3)
            if g.get("after_first_records_s") and c.get("after_first_records_s"):
                rnd["ratio_after_first"] = round(g["after_first_records_s"] / c["after_first_records_s"], 3)
            block["rounds"].append(rnd)
    for key in ("ratio", "ratio_after_slots", "ratio_after_first"):
        got = [r[key] for r in block["rounds"] if key in r]
        if got:
            block[key] = {"median": round(statistics.median(got), 3), "min": min(got), "max": max(got)}
    return block


def k(x: float | None) -> str:
    return f"{x / 1000:.1f}k" if x else "-"


def report(res: dict) -> None:
    head = (
        "size",
        "round",
        "relay /s",
        "gateway /s (from start)",
        "ratio",
        "gateway /s (after slots)",
        "ratio",
        "after 1st rec: relay / gateway",
        "ratio",
        "check",
    )
    lines = [head]
    for b in res["sizes"]:
        for i, r in enumerate(b["rounds"], 1):
            g, c = r["gateway"], r["relay"]
            lines.append(
                (
                    f"{b['value_bytes']} B",
                    str(i),
                    k(c.get("records_s")),
                    k(g.get("records_s")),
                    f"{r.get('ratio', '-')}",
                    k(g.get("after_slots_records_s")),
                    f"{r.get('ratio_after_slots', '-')}",
                    f"{k(c.get('after_first_records_s'))} / {k(g.get('after_first_records_s'))}",
                    f"{r.get('ratio_after_first', '-')}",
                    "ok" if g["check"]["ok"] and c["check"]["ok"] else "WRONG",
                )
            )
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
    for x in lines:
        print("  ".join(s.ljust(w) for s, w in zip(x, widths, strict=True)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--sizes", default="100,1024", help="value sizes (bytes, bench/data.py), comma-separated")
    ap.add_argument("--size", type=int, help="one value size (instead of --sizes)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each runs the relay and the gateway, alternating")
    ap.add_argument("--poll-ms", type=float, default=20, help="the observer's period")
    ap.add_argument("--slots-poll", type=float, default=0.5, help="seconds between `cluster gateway list` runs")
    ap.add_argument("--sample", type=int, default=1000, help="records compared at each of 3 places a partition")
    ap.add_argument("--timeout", type=float, default=600, help="seconds the observer waits for a copy")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--note", default="", help="about the machine, kept in the JSON")
    ap.add_argument("--observe", nargs=3, help=argparse.SUPPRESS)  # the observer's own process
    a = ap.parse_args()
    if a.observe:
        return observer_main(a)
    if not RELAY.exists():
        print(f"no {RELAY}: run bench/setup", file=sys.stderr)
        return 2
    sizes = [a.size] if a.size else [int(x) for x in a.sizes.split(",") if x]
    logdir = Path(tempfile.mkdtemp(prefix="streamrepl-outside-"))
    res: dict = {
        **provenance(a.note or "no note"),
        "load_at_start": os.getloadavg(),
        "records": a.records,
        "partitions": a.partitions,
        "rounds": a.rounds,
        "poll_ms": a.poll_ms,
        "slots_poll_s": a.slots_poll,
        "relay": "bench/relay.c with p.enable.idempotence=true, clocked from its process start",
        "gateway": "`streamrepl gateway start`, 1 process, defaults; clocked from its start and from `cluster gateway"
        " list` first showing its 64 slots",
        "end": "an observer process: AdminClient list_offsets (latest) of every partition each poll, the last batch"
        " read near the end; CLOCK_MONOTONIC of the first poll where every end equals the source's",
        "logs": str(logdir),
        "sizes": [],
    }
    for size in sizes:
        res["sizes"].append(size_block(a, size, logdir))
        if a.json:  # after each size: a long run leaves what it measured even if a later size fails
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps({**res, "load_at_end": os.getloadavg()}, indent=1) + "\n")
    res["load_at_end"] = os.getloadavg()
    report(res)
    for b in res["sizes"]:
        parts = [f"{b['value_bytes']} B:"]
        for key in ("ratio", "ratio_after_slots", "ratio_after_first"):
            if key in b:
                parts.append(f"{key} median {b[key]['median']} ({b[key]['min']}-{b[key]['max']})")
        print(" ".join(parts))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
