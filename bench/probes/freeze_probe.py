"""Does a producer frozen (SIGSTOP) with records queued send them when it resumes, after someone else wrote?

    .venv/bin/python bench/probes/freeze_probe.py MESSAGE_TIMEOUT_MS TRIALS     (e.g. 0 5, then 2000 5)

A child process produces to one partition continuously (idempotent, acks=all, linger 2 ms, like a gateway);
the probe freezes it at a random moment, writes a MARKER record itself (the gateway that takes over), waits
past the child's message timeout, resumes it, and counts the child's records that landed after the marker
although they were produced before the freeze. With message.timeout.ms=0 (never expire) some do; with a
timeout shorter than the freeze none do: librdkafka expires them before sending, and the epoch bump that
follows gets the producer fenced by Tansu (the child reports the errors). RELIABILITY.md has the figures.
"""

import random
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CHILD = r"""
import sys, time
from confluent_kafka import Producer
bs, topic, tmo = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
              "message.timeout.ms": tmo, "batch.num.messages": 10000})
fails = [0]; errs = {}
def cb(err, msg):
    if err is not None:
        fails[0] += 1; errs[err.str()] = errs.get(err.str(), 0) + 1
end = time.monotonic() + float(sys.argv[4])
while time.monotonic() < end:
    for _ in range(40):
        p.produce(topic, value=repr(time.monotonic()).encode(), partition=0, on_delivery=cb)
    p.poll(0)
    time.sleep(0.01)
p.flush(60)
print("fails", fails[0], errs, flush=True)
"""


def main() -> None:
    from streamrepl.local import EphemeralClusters

    tmo = int(sys.argv[1])
    trials = int(sys.argv[2])
    with EphemeralClusters(["fz"]) as ec:
        bs = ec.brokers["fz"].bootstrap
        adm = AdminClient({"bootstrap.servers": bs})
        bad_total = 0
        for t in range(trials):
            topic = f"fz{t}"
            adm.create_topics([NewTopic(topic, 1, 1)])[topic].result()
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, bs, topic, str(tmo), "8"], stdout=subprocess.PIPE, text=True
            )
            time.sleep(1.5 + random.random())
            child.send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            time.sleep(0.5)
            mp = Producer({"bootstrap.servers": bs, "acks": "all"})
            mp.produce(topic, value=b"MARKER", partition=0)
            mp.flush(10)
            time.sleep(tmo / 1000 + 1.5)
            child.send_signal(signal.SIGCONT)
            out = child.communicate(timeout=120)[0].strip()
            c = Consumer(
                {
                    "bootstrap.servers": bs,
                    "group.id": f"r{t}",
                    "auto.offset.reset": "earliest",
                    "enable.partition.eof": True,
                }
            )
            c.assign([TopicPartition(topic, 0, 0)])
            seen_marker = False
            bad = 0
            after = 0
            n = 0
            while True:
                ms = c.consume(10000, 2)
                if not ms:
                    break
                eof = False
                for m in ms:
                    if m.error():
                        eof = True
                        continue
                    n += 1
                    if m.value() == b"MARKER":
                        seen_marker = True
                        continue
                    if seen_marker:
                        after += 1
                        if float(m.value()) < frozen_at:
                            bad += 1
                if eof:
                    break
            c.close()
            bad_total += bad
            print(
                f"trial {t}: {n} records, {after} after the marker, {bad} of them queued before the freeze; child: {out}",
                flush=True,
            )
        print("TOTAL stale records after the marker:", bad_total)


if __name__ == "__main__":
    main()
