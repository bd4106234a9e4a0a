"""The replication policy: how a copied record is marked, and how gaps are filled.

Every copy of a stream holds each record at the same offset as the stream where it was
first published. Two headers make that work across any topology:

* ``streamrepl.origin`` — the UUID (text) of the stream where the record was first
  published. A record produced directly to a stream carries no such header: its origin is
  that stream. Copies add the header when they copy a header-less record and keep it
  otherwise, so a record is never applied back to its origin (multi-master loops) and
  every partition has exactly one origin (a second origin means a conflict).
* ``streamrepl.filler`` — marks a filler record. Where the source partition has an
  offset with no visible record (a transaction marker, an aborted transaction's record,
  a record removed by compaction or expiry), the copy writes one filler record there, with
  no key and no value, so that every later record keeps its offset. Consumers built on
  ``streamrepl.client`` skip fillers; plain Kafka consumers see them as empty records
  carrying this header.

All other headers, the key, the value and the timestamp are copied unchanged. When the
source topic stamps LogAppendTime, the copy carries ``streamrepl.tstype: logappendtime``
since the copy's own topics are CreateTime (so that the source's timestamps survive).
"""

from __future__ import annotations

from typing import Any

ORIGIN = "streamrepl.origin"
FILLER = "streamrepl.filler"
TSTYPE = "streamrepl.tstype"
OWN_HEADERS = frozenset({ORIGIN, FILLER, TSTYPE})

Header = tuple[str, Any]
#: a filler's headers in the run form (origins.py): its origin is the run's
FILLER_ONLY: list[Header] = [(FILLER, b"1")]


def origin_of(headers: Any, own_uuid: str) -> str:
    """The origin UUID of a record read from the stream whose UUID is `own_uuid`."""
    if headers:
        for k, v in headers:
            if k == ORIGIN and v is not None:
                return v.decode()
    return own_uuid


def is_filler(headers: Any) -> bool:
    return bool(headers) and any(k == FILLER for k, _ in headers or ())


def filler_headers(origin_uuid: str) -> list[Header]:
    return [(ORIGIN, origin_uuid.encode()), (FILLER, b"1")]


def user_headers(headers: Any) -> list[Header]:
    """The headers a producer set, without the ones replication adds."""
    return [(k, v) for k, v in (headers or ()) if k not in OWN_HEADERS]
