"""docs/alerts.yml, the Prometheus alert rules shipped for the gateways' metrics: valid (`promtool check rules`), and
they fire when they should and only then (`promtool test rules docs/alerts.test.yml`). promtool comes with the
prometheus package (Debian: apt-get install prometheus; .ci/run installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from streamrepl.replication.stats import LATENCY_BUCKETS

DOCS = Path(__file__).resolve().parents[2] / "docs"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not found (Debian: apt-get install prometheus)")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=DOCS, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_the_alert_rules_are_valid() -> None:
    r = promtool("check", "rules", "alerts.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@needs_promtool
def test_the_alert_rules_fire_when_they_should() -> None:
    r = promtool("test", "rules", "alerts.test.yml")
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_rules_name_metrics_that_the_gateways_export() -> None:
    rules = (DOCS / "alerts.yml").read_text()
    used = set(re.findall(r"\b(streamrepl_\w+)", rules))
    source = "".join(p.read_text() for p in (Path(__file__).resolve().parents[2] / "streamrepl").rglob("*.py"))
    exported = {re.sub(r"_(total|bucket)$", "", m) for m in used}
    missing = sorted(m for m in exported if f'"{m}"' not in source)
    assert not missing, f"docs/alerts.yml uses metrics no gateway exports: {missing}"
    # histogram_quantile cannot say more than the largest finite bucket: the lag threshold must be below it
    threshold = float(re.search(r"replication_latency_seconds_bucket\[5m\]\)\)\) > (\d+)", rules).group(1))  # type: ignore[union-attr]
    assert threshold < LATENCY_BUCKETS[-1]
