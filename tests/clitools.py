"""Re-exports of support.cli under their old module name, for test modules whose imports were left as
they were while other branches edited them. Goes after the merge: import from `support` instead."""

from support.cli import STREAMREPL_BIN, Run, one_error_line, run_cli, run_proc, unique_path

__all__ = ["STREAMREPL_BIN", "Run", "one_error_line", "run_cli", "run_proc", "unique_path"]
