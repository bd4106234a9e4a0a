"""Transitional: the names that modules not yet converted to `streamrepl.kafka` still use.

gateway.py, copy.py, client.py, cursors.py, spark_source.py and the tests that read through
them move in parallel branches; once they ask `streamrepl.kafka` themselves, this module goes.
Add nothing here: new code imports `streamrepl.kafka`.
"""

from __future__ import annotations

from .kafka import (
    REQUEST_TIMEOUT,
    add_partitions,
    client_config,
    consumer,
    create_topics,
    delete_topics,
    describe_exception,
    last_record,
    ping,
    producer,
    scrub,
    topics,
    true_end,
    true_ends,
    unreachable,
)
from .kafka import admin_client as admin

__all__ = [
    "REQUEST_TIMEOUT",
    "add_partitions",
    "admin",
    "client_config",
    "consumer",
    "create_topics",
    "delete_topics",
    "describe_exception",
    "last_record",
    "ping",
    "producer",
    "scrub",
    "topics",
    "true_end",
    "true_ends",
    "unreachable",
]
