"""Markers follow folders: each kind of test has its folder (tests/unit, tests/e2e, tests/chaos, tests/sim), and the
folder's conftest.py marks what it holds, so that `-m e2e`, `-m 'not e2e'` and `-m chaos` select by folder."""

from __future__ import annotations

from pathlib import Path

import pytest


def in_folder(item: pytest.Item, folder: Path) -> bool:
    return folder in Path(item.path).parents


def mark_folder(items: list[pytest.Item], folder: Path, *marks: str) -> None:
    """Add `marks` to every test collected from `folder` (a conftest's collection hook sees every item of the run)."""
    for item in items:
        if in_folder(item, folder):
            for mark in marks:
                item.add_marker(getattr(pytest.mark, mark))
