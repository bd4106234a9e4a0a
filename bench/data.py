"""The records every benchmark writes: values as users send them, the same for every script and every run.

Each record is a JSON object of an order event (ids, a customer's name, amounts, an enum status, a currency, a
country, an ISO timestamp, a sequence number), padded with a JSON note field to the requested size exactly; its
key is unique (`cust-NNNNN-<seq>`, a customer among 50,000 and the record's number); it carries one header
(`content-type`) or two (and a `trace-id`, every other record); its timestamp is near now (the start of the fill,
one millisecond more every 100 records). Values come from a pool of 4,096 made from the seed, each with its own
sequence number written in, so no two values of a run are alike and the pool (over 64 KiB, lz4's window) adds no
redundancy lz4 could use across records. Compressed with lz4 in batches as a producer's would be, the values take
about a third of their size: `python bench/data.py` measures it (needs the lz4 package, installed by bench/setup).

    from data import Records
    recs = Records(size=100)
    for i in range(n): key, value, headers = recs.key(i), recs.value(i), recs.headers(i)
"""

from __future__ import annotations

import json
import random
import sys
import time

NAME = "bench/data.py orders v1"
SEED = 33
POOL = 4096
CUSTOMERS = 50_000
# What the benchmarks' producers use: the source written as users write JSON (lz4), librdkafka's defaults otherwise.
COMPRESSION = "lz4"

FIRST = ["Maria", "Jan", "Aiko", "Olu", "Priya", "Lucas", "Chen", "Fatima", "Noah", "Elena", "Ivan", "Sofia"]
LAST = ["Kowalski", "Tanaka", "Okafor", "Sharma", "Silva", "Wang", "Haddad", "Smith", "Rossi", "Petrov", "Garcia"]
STATUS = ["created", "paid", "packed", "shipped", "delivered", "returned", "cancelled"]
CURRENCY = ["EUR", "USD", "JPY", "GBP", "INR", "BRL"]
COUNTRY = ["DE", "US", "JP", "GB", "IN", "BR", "FR", "NG", "CN", "IT"]
WORDS = (
    "please leave at the door ring twice gift wrap fragile handle with care call on arrival back entrance"
    " office hours only signature required no substitutions express weekend delivery"
).split()
SEQ = b"@@@@@@@@@@"  # where each record's sequence number goes (10 digits)


class Records:
    """Record i of a run of `size`-byte values, from `seed`: key(i), value(i) (exactly `size` bytes, at least 80),
    headers(i), timestamp(i) (ms). `pool`: how many values are made (the benchmarks' 4,096 take a few seconds)."""

    def __init__(self, size: int, seed: int = SEED, now_ms: int | None = None, pool: int = POOL):
        if size < 80:
            raise ValueError(f"values of {size} B are too small for an order record (80 B at least)")
        self.size, self.seed = size, seed
        self.now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        rng = random.Random(seed * 1_000_003 + size)
        self.pool = pool
        self._pool = [self._make(rng, size) for _ in range(pool)]
        self._customers = [b"cust-%05d-" % rng.randrange(CUSTOMERS) for _ in range(pool)]
        self._traces = [f"{rng.getrandbits(128):032x}".encode() for _ in range(pool)]

    @staticmethod
    def _make(rng: random.Random, size: int) -> tuple[bytes, bytes]:
        order: dict[str, object] = {
            "seq": SEQ.decode(),
            "order": f"ord-{rng.randrange(10**9):09d}",
            "status": rng.choice(STATUS),
            "cur": rng.choice(CURRENCY),
            "amount": round(rng.uniform(1, 5000), 2),
            "country": rng.choice(COUNTRY),
            "customer": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            "at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_790_000_000 + rng.randrange(86_400 * 30)))
            + f".{rng.randrange(1000):03d}Z",
        }
        # Larger values hold the order's lines, as an order event does, until about 60 bytes are left for the note.
        lines: list[dict[str, object]] = []
        # The length of the order with its lines, kept as they are added (one dumps a line, not the whole order).
        length = len(json.dumps(order, separators=(",", ":"))) + len(',"lines":[]')
        while length < size - 120:
            line = {
                "sku": f"sku-{rng.randrange(20_000):05d}",
                "qty": rng.randrange(1, 5),
                "price": round(rng.uniform(0.5, 400), 2),
                "tax": rng.choice(["std", "reduced", "zero"]),
            }
            length += len(json.dumps(line, separators=(",", ":"))) + (1 if lines else 0)
            lines.append(line)
        if lines:
            order["lines"] = lines
        text = json.dumps(order, separators=(",", ":")).encode()
        # Trim to the size (the smallest values keep the ids, the sequence and the status), then pad with a note.
        while len(text) > size - 11 and len(order) > 3:
            order.popitem()
            text = json.dumps(order, separators=(",", ":")).encode()
        room = size - len(text) - len(b',"note":""')
        words: list[str] = []
        while room > 0 and len(" ".join(words)) < room:
            words.append(rng.choice(WORDS) if rng.random() < 0.85 else f"{rng.randrange(10**6):x}")
        note = " ".join(words)[: max(room, 0)]
        if room >= 0:
            text = text[:-1] + b',"note":"' + note.encode() + b'"}'
        text = text[:-1].ljust(size - 1) + b"}"  # a space or two where the note could not fill exactly
        head, tail = text.split(SEQ)
        return head, tail

    def value(self, i: int) -> bytes:
        head, tail = self._pool[i % self.pool]
        return b"%s%010d%s" % (head, i % 10**10, tail)

    def key(self, i: int) -> bytes:
        return b"%s%d" % (self._customers[(i * 7) % self.pool], i)

    def headers(self, i: int) -> list[tuple[str, bytes]]:
        if i % 2:
            return [("content-type", b"application/json"), ("trace-id", self._traces[i % self.pool])]
        return [("content-type", b"application/json")]

    def timestamp(self, i: int) -> int:
        return self.now_ms + i // 100

    def about(self, compression: str = COMPRESSION) -> dict:
        """How the data was made, for a results file."""
        return {
            "generator": NAME,
            "seed": self.seed,
            "value_bytes": self.size,
            "producer_compression": compression,
            "lz4_ratio": lz4_ratio(self),
        }


def lz4_ratio(recs: Records, records: int = 20_000, batch_bytes: int = 1_000_000) -> float | None:
    """Value bytes over their lz4 frames, compressed in batches of about `batch_bytes` of one partition's records
    (what a producer's batch holds, keys and headers apart); None without the lz4 package."""
    try:
        import lz4.frame
    except ImportError:
        return None
    raw = packed = 0
    batch: list[bytes] = []
    for i in range(0, records * 4, 4):  # partition 0 of 4: every fourth record
        batch.append(recs.value(i))
        if len(batch) * recs.size >= batch_bytes:
            data = b"".join(batch)
            raw, packed, batch = raw + len(data), packed + len(lz4.frame.compress(data)), []
    if batch:
        data = b"".join(batch)
        raw, packed = raw + len(data), packed + len(lz4.frame.compress(data))
    return round(raw / packed, 2)


def about_repeated_byte(size: int) -> dict:
    """The old benchmarks' values, kept as one row of bench/run.py."""
    return {"generator": "one repeated byte (b'v' * size)", "value_bytes": size, "producer_compression": "none"}


if __name__ == "__main__":
    for size in [int(x) for x in (sys.argv[1:] or ["100", "1024"])]:
        r = Records(size)
        print(json.dumps(r.about()))
        print(" ", r.key(1).decode(), r.value(1).decode(), r.headers(1))
