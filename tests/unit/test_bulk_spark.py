"""The Spark options a bulk job is given are checked before the job changes anything (issue 16, item 6)."""

from __future__ import annotations

import pytest

from streamrepl.bulk.spark import check_spark_options
from streamrepl.errors import InvalidArgument


@pytest.mark.parametrize(
    "master",
    [
        None,
        "local",
        "local[*]",
        "local[4]",
        "local[4,2]",
        "local-cluster[2,1,1024]",
        "yarn",
        "spark://h:7077",
        "spark://h1:7077,h2:7077",
        "k8s://https://k8s.example:6443",
    ],
)
def test_masters_spark_accepts_pass(master: str | None) -> None:
    check_spark_options(master, None)


@pytest.mark.parametrize("master", ["bogus://x", "", "spark:", "spark://", "localhost", "YARN", "mesos://h:5050"])
def test_a_bad_master_is_one_line_that_says_what_spark_accepts(master: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        check_spark_options(master, None)
    text = e.value.message
    assert "\n" not in text and f"-master {master!r}" in text
    assert "yarn" in text and "spark://" in text and "k8s://" in text and "local" in text


@pytest.mark.parametrize("numthreads", [0, -4])
def test_numthreads_below_one_is_refused(numthreads: int) -> None:
    with pytest.raises(InvalidArgument, match=f"-numthreads {numthreads} must be at least 1"):
        check_spark_options(None, numthreads)
    check_spark_options(None, 1)
