"""What the tests share: running the CLI (support.cli), the brokers (support.clusters), freezing a
process (support.freeze), and setting streams up and comparing them (support.streams).

pyproject's pytest `pythonpath = ["tests"]` makes `from support import ...` work in every test module.
"""

from support.cli import STREAMREPL_BIN, Run, one_error_line, run_cli, run_in_terminal, run_proc, unique_path
from support.clusters import (
    BROKER,
    BROKER_FIXTURES,
    FAST_GROUP,
    ON_NOIDA,
    RECENT_MS,
    SHARED_CLUSTERS,
    kill_broker,
    not_on_noida,
    shared_clusters,
)
from support.freeze import broker_frozen, frozen

__all__ = [
    "BROKER",
    "BROKER_FIXTURES",
    "FAST_GROUP",
    "ON_NOIDA",
    "RECENT_MS",
    "SHARED_CLUSTERS",
    "STREAMREPL_BIN",
    "Run",
    "broker_frozen",
    "frozen",
    "kill_broker",
    "not_on_noida",
    "one_error_line",
    "run_cli",
    "run_in_terminal",
    "run_proc",
    "shared_clusters",
    "unique_path",
]
