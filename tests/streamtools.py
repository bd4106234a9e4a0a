"""Re-exports of support.streams under their old module name, for test modules whose imports were left
as they were while other branches edited them. Goes after the merge: import from `support.streams`.

`run_cli` here was always the subprocess runner (it is `cli_proc` in support.streams); the in-process
one is `cli`."""

from support.streams import (
    Gateways,
    Rec,
    SteadyProducer,
    Tally,
    assert_identical,
    caught_up,
    cli,
    cli_data,
    cli_json,
    cli_proc,
    compare,
    link,
    new_stream,
    new_topics,
    produce,
    read_all,
    read_partition,
    replica_rows,
    same_ends,
    sp,
    tally,
    true_ends,
    uuid_of,
    wait_until,
)
from support.streams import cli_proc as run_cli

__all__ = [
    "Gateways",
    "Rec",
    "SteadyProducer",
    "Tally",
    "assert_identical",
    "caught_up",
    "cli",
    "cli_data",
    "cli_json",
    "cli_proc",
    "compare",
    "link",
    "new_stream",
    "new_topics",
    "produce",
    "read_all",
    "read_partition",
    "replica_rows",
    "run_cli",
    "same_ends",
    "sp",
    "tally",
    "true_ends",
    "uuid_of",
    "wait_until",
]
