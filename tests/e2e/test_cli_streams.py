"""`streamrepl stream create|edit|delete|info|list` end to end, against the session's brokers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from support.cli import Run, one_error_line, run_proc, unique_path

from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.noida

ALICE_ENG = {"STREAMREPL_IDENTITY": "user=alice;groups=eng"}
ALICE_QA = {"STREAMREPL_IDENTITY": "user=alice;groups=qa"}
ERROR_LINE = re.compile(r"^ERROR \((\d+)\) - (stream [a-z]+): (.+)$")

Cli = Callable[..., Run]


def info(cli: Cli, path: str, env: dict[str, str] | None = None) -> dict:
    r = cli("stream", "info", "-path", path, "-json", env=env)
    assert r.code == 0, r
    [row] = r.data()
    return row


def listed(cli: Cli, cluster: str | None = None) -> dict[str, dict]:
    args = ["stream", "list", "-json"] + (["-cluster", cluster] if cluster else [])
    r = cli(*args)
    assert r.code == 0, r
    return {row["path"]: row for row in r.data()}


def topic_configs(clusters: EphemeralClusters, cluster: str, kafka_topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": clusters.brokers[cluster].bootstrap})
    [fut] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, kafka_topic)]).values()
    return {k: v.value for k, v in fut.result(timeout=10).items()}


# -- create / info ----------------------------------------------------------------------------
def test_create_with_every_option_and_info_shows_them(cli: Cli) -> None:
    path = unique_path()
    r = cli(
        "stream", "create", "-path", path,
        "-ttl", "3600",
        "-autocreate", "false",
        "-defaultpartitions", "4",
        "-compression", "lz4",
        "-produceperm", "u:alice | g:eng",
        "-consumeperm", "p",
        "-topicperm", "g:eng & !u:mallory",
        "-copyperm", "",
        "-adminperm", "u:root|u:alice",
        "-defaulttimestamptype", "logappendtime",
    )  # fmt: skip
    assert (r.code, r.stdout, r.stderr) == (0, "", ""), r
    row = info(cli, path, env=ALICE_ENG)
    assert row["path"] == path
    assert row["cluster"] == "sanfrancisco"
    assert re.fullmatch(r"[0-9a-f-]{36}", row["uuid"])
    assert row["ttl"] == 3600
    assert row["autocreate"] is False
    assert row["defaultpartitions"] == 4
    assert row["compression"] == "lz4"
    assert row["defaulttimestamptype"] == "logappendtime"
    assert row["numtopics"] == 0
    # ACEs are stored normalised, and shown to whoever holds adminperm.
    assert row["produceperm"] == "u:alice | g:eng"
    assert row["consumeperm"] == "p"
    assert row["topicperm"] == "g:eng & !u:mallory"
    assert row["copyperm"] == ""
    assert row["adminperm"] == "u:root | u:alice"


def test_create_defaults_follow_the_reference(cli: Cli) -> None:
    path = unique_path("newyork")
    assert cli("stream", "create", "-path", path).code == 0
    row = info(cli, path, env={"STREAMREPL_IDENTITY": "user=carol"})
    assert (row["ttl"], row["autocreate"], row["defaultpartitions"]) == (604800, True, 1)
    assert row["defaulttimestamptype"] == "createtime"
    assert "adminperm" not in row  # carol is not the creator
    # Every permission defaults to u:<creator>.
    creator_row = info(cli, path)
    for perm in ("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm"):
        assert creator_row[perm] == f"u:{creator_row['creator']}"


def test_creator_default_ace_names_the_identity_that_created(cli: Cli) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path, env={"STREAMREPL_IDENTITY": "user=dave"}).code == 0
    row = info(cli, path, env={"STREAMREPL_IDENTITY": "user=dave"})
    assert row["creator"] == "dave"
    assert row["adminperm"] == "u:dave"


def test_double_dash_options_and_mapr_prefix(cli: Cli) -> None:
    name = unique_path("newyork").rsplit("/", 1)[1]
    assert cli("stream", "create", "--path", f"/mapr/newyork/{name}", "--ttl", "60").code == 0
    row = info(cli, f"/newyork/{name}")
    assert row["ttl"] == 60 and row["path"] == f"/newyork/{name}"


def test_path_without_cluster_is_on_the_default_cluster(cli: Cli) -> None:
    name = unique_path().rsplit("/", 1)[1]
    assert cli("stream", "create", "-path", f"/{name}").code == 0
    assert info(cli, f"/sanfrancisco/{name}")["cluster"] == "sanfrancisco"


# -- copymetafrom -----------------------------------------------------------------------------
def test_copymetafrom_copies_settings_and_gets_its_own_uuid(cli: Cli) -> None:
    src, dst = unique_path(), unique_path("newyork")
    r = cli(
        "stream", "create", "-path", src, "-defaultpartitions", "3", "-ttl", "86400",
        "-compression", "zlib", "-autocreate", "no", "-defaulttimestamptype", "logappendtime",
        "-produceperm", "g:producers", "-adminperm", "u:root | g:ops",
    )  # fmt: skip
    assert r.code == 0, r
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    assert cli("stream", "create", "-path", dst, "-copymetafrom", src).code == 0
    a, b = info(cli, src), info(cli, dst)
    for k in ("defaultpartitions", "ttl", "compression", "autocreate", "defaulttimestamptype", "produceperm"):
        assert b[k] == a[k], k
    assert b["adminperm"] == "u:root | g:ops"
    assert b["uuid"] != a["uuid"]
    assert b["path"] == dst and b["cluster"] == "newyork"
    assert b["numtopics"] == 0  # settings, not topics


def test_copymetafrom_then_explicit_option_wins(cli: Cli) -> None:
    src, dst = unique_path(), unique_path()
    assert cli("stream", "create", "-path", src, "-ttl", "100", "-defaultpartitions", "2").code == 0
    assert cli("stream", "create", "-path", dst, "-copymetafrom", src, "-ttl", "7").code == 0
    row = info(cli, dst)
    assert (row["ttl"], row["defaultpartitions"]) == (7, 2)


# -- edit ---------------------------------------------------------------------------------------
def test_edit_changes_settings_and_kafka_configs(cli: Cli, clusters: EphemeralClusters) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path, "-ttl", "86400").code == 0
    r = cli("stream", "topic", "create", "-path", path, "-topic", "t", "-json")
    assert r.code == 0, r
    [row] = [t for t in cli("stream", "topic", "list", "-path", path, "-json").data()]
    kt = row["kafkatopic"]
    conf = topic_configs(clusters, "sanfrancisco", kt)
    assert conf.get("retention.ms") == "86400000"
    r = cli("stream", "edit", "-path", path, "-ttl", "120", "-compression", "zstd", "-autocreate", "YES")
    assert (r.code, r.stderr) == (0, ""), r
    row = info(cli, path)
    assert (row["ttl"], row["compression"], row["autocreate"]) == (120, "zstd", True)
    conf = topic_configs(clusters, "sanfrancisco", kt)
    assert conf.get("retention.ms") == "120000"
    assert conf.get("compression.type") == "zstd"
    # ttl 0 keeps messages forever.
    assert cli("stream", "edit", "-path", path, "-ttl", "0").code == 0
    assert topic_configs(clusters, "sanfrancisco", kt).get("retention.ms") == "-1"
    # Back to inherit: the topics no longer force a codec.
    assert cli("stream", "edit", "-path", path, "-compression", "inherit").code == 0
    assert info(cli, path)["compression"] == "inherit"
    assert topic_configs(clusters, "sanfrancisco", kt).get("compression.type", "producer") == "producer"


def test_edit_compaction_settings(cli: Cli, clusters: EphemeralClusters) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "topic", "create", "-path", path, "-topic", "t").code == 0
    r = cli(
        "stream", "edit", "-path", path, "-compact", "true", "-mincompactionlag", "1000",
        "-deleteretention", "5000",
    )  # fmt: skip
    assert r.code == 0, r
    assert info(cli, path)["compact"] is True
    conf = topic_configs(
        clusters, "sanfrancisco", cli("stream", "topic", "list", "-path", path, "-json").data()[0]["kafkatopic"]
    )
    assert conf.get("cleanup.policy") == "compact"
    assert conf.get("min.compaction.lag.ms") == "1000"
    assert conf.get("delete.retention.ms") == "5000"


def test_edit_keeps_uuid_and_other_settings(cli: Cli) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path, "-defaultpartitions", "5", "-ttl", "10").code == 0
    before = info(cli, path)
    assert cli("stream", "edit", "-path", path, "-produceperm", "g:x").code == 0
    after = info(cli, path)
    assert after["uuid"] == before["uuid"]
    assert after["produceperm"] == "g:x"
    assert (after["defaultpartitions"], after["ttl"]) == (5, 10)


# -- ACE enforcement ------------------------------------------------------------------------------
def test_edit_and_delete_need_adminperm(cli: Cli) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path, "-adminperm", "u:root | g:eng").code == 0
    before = info(cli, path)

    r = cli("stream", "edit", "-path", path, "-ttl", "5", env=ALICE_QA)
    line = one_error_line(r)
    assert re.match(r"^ERROR \(1\) - stream edit: user 'alice' lacks adminperm", line), line
    r = cli("stream", "delete", "-path", path, env=ALICE_QA)
    assert "lacks adminperm" in one_error_line(r)
    assert info(cli, path) == before

    assert cli("stream", "edit", "-path", path, "-ttl", "5", env=ALICE_ENG).code == 0
    assert info(cli, path)["ttl"] == 5
    assert cli("stream", "delete", "-path", path, env=ALICE_ENG).code == 0
    assert path not in listed(cli, "sanfrancisco")


def test_info_hides_aces_from_users_without_adminperm(cli: Cli) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path, "-adminperm", "g:eng", "-force", "true").code == 0
    assert "adminperm" not in info(cli, path, env=ALICE_QA)
    assert info(cli, path, env=ALICE_ENG)["adminperm"] == "g:eng"


def test_admin_can_give_adminperm_away_and_then_loses_it(cli: Cli) -> None:
    path = unique_path()
    # Handing it to someone else locks its author out: refused unless forced.
    refused = cli("stream", "create", "-path", path, "-adminperm", "g:eng")
    assert "-force true" in one_error_line(refused)
    assert cli("stream", "create", "-path", path, "-adminperm", "g:eng", "-force", "true").code == 0
    assert cli("stream", "edit", "-path", path, "-adminperm", "u:bob", "-force", "true", env=ALICE_ENG).code == 0
    r = cli("stream", "edit", "-path", path, "-adminperm", "g:eng", env=ALICE_ENG)
    assert "lacks adminperm" in one_error_line(r)
    assert cli("stream", "edit", "-path", path, "-ttl", "9", env={"STREAMREPL_IDENTITY": "user=bob"}).code == 0


def test_public_ace_allows_anyone(cli: Cli) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path, "-adminperm", "p").code == 0
    assert cli("stream", "edit", "-path", path, "-ttl", "9", env={"STREAMREPL_IDENTITY": "user=zed"}).code == 0


def test_empty_ace_allows_nobody(cli: Cli) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path, "-consumeperm", '""').code == 0
    r = cli("consume", "-path", f"{path}:t", "-timeout", "1")
    assert "lacks consumeperm" in one_error_line(r)


# -- delete ---------------------------------------------------------------------------------------
def test_delete_removes_stream_and_its_kafka_topics(cli: Cli, clusters: EphemeralClusters) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "topic", "create", "-path", path, "-topic", "a").code == 0
    kt = cli("stream", "topic", "list", "-path", path, "-json").data()[0]["kafkatopic"]
    assert cli("stream", "delete", "-path", path).code == 0
    assert path not in listed(cli)
    admin = AdminClient({"bootstrap.servers": clusters.brokers["sanfrancisco"].bootstrap})
    assert kt not in admin.list_topics(timeout=10).topics
    r = cli("stream", "info", "-path", path)
    assert "does not exist" in one_error_line(r)
    # The path can be used again, and starts empty with a new uuid.
    assert cli("stream", "create", "-path", path).code == 0
    assert info(cli, path)["numtopics"] == 0


def test_delete_leaves_similarly_named_streams_alone(cli: Cli) -> None:
    base = unique_path()
    for p in (base, base + "x", base + "/sub"):
        assert cli("stream", "create", "-path", p).code == 0
        assert cli("stream", "topic", "create", "-path", p, "-topic", "t").code == 0
    assert cli("stream", "delete", "-path", base).code == 0
    for p in (base + "x", base + "/sub"):
        assert info(cli, p)["numtopics"] == 1
        assert len(cli("stream", "topic", "info", "-path", p, "-topic", "t", "-json").data()) == 1


# -- list -----------------------------------------------------------------------------------------
def test_list_every_cluster_and_one(cli: Cli) -> None:
    sf, ny = unique_path(), unique_path("newyork")
    assert cli("stream", "create", "-path", sf).code == 0
    assert cli("stream", "create", "-path", ny).code == 0
    every = listed(cli)
    assert sf in every and ny in every
    only_ny = listed(cli, "newyork")
    assert ny in only_ny and sf not in only_ny
    assert all(row["cluster"] == "newyork" for row in only_ny.values())


def test_json_envelope_shape(cli: Cli) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path).code == 0
    r = cli("stream", "info", "-path", path, "-json")
    assert r.stderr == ""
    doc = json.loads(r.stdout)
    assert set(doc) >= {"timestamp", "timeofday", "status", "total", "data"}
    assert doc["status"] == "OK" and doc["total"] == 1 == len(doc["data"])
    assert isinstance(doc["timestamp"], int) and doc["timestamp"] > 1_600_000_000_000
    assert isinstance(doc["timeofday"], str)
    # The global option before the verb works too.
    assert json.loads(cli("-json", "stream", "info", "-path", path).stdout)["data"] == doc["data"]
    # A verb without data: an OK envelope with nothing in it.
    r = cli("stream", "edit", "-path", path, "-ttl", "1", "-json")
    assert r.code == 0
    doc = json.loads(r.stdout)
    assert (doc["status"], doc["total"], doc["data"]) == ("OK", 0, [])


def test_tabular_and_noheader_output(cli: Cli) -> None:
    path = unique_path()
    assert cli("stream", "create", "-path", path, "-ttl", "77").code == 0
    r = cli("stream", "info", "-path", path)
    header, row = r.stdout.splitlines()
    cols, values = header.split("\t"), row.split("\t")
    assert len(cols) == len(values)
    assert dict(zip(cols, values, strict=True))["ttl"] == "77"
    assert dict(zip(cols, values, strict=True))["path"] == path
    r = cli("stream", "info", "-path", path, "-noheader")
    assert r.stdout.splitlines() == [row]
    assert cli("-noheader", "stream", "info", "-path", path).stdout.splitlines() == [row]
    # `cut` and `awk` can find a stream in the listing.
    rows = [line.split("\t") for line in cli("stream", "list", "-noheader").stdout.splitlines()]
    assert [path] in [r[:1] for r in rows]


# -- errors ---------------------------------------------------------------------------------------
def test_error_line_and_json_error_envelope(cli: Cli) -> None:
    path = unique_path()
    r = cli("stream", "info", "-path", path)
    m = ERROR_LINE.match(one_error_line(r))
    assert m, r.stderr
    assert (m.group(1), m.group(2)) == ("2", "stream info")
    assert "does not exist" in m.group(3)
    assert r.code == 1

    r = cli("stream", "info", "-path", path, "-json")
    assert r.code == 1 and r.stderr == ""
    doc = json.loads(r.stdout)
    assert doc["status"] == "ERROR"
    [err] = doc["errors"]
    assert err["id"] == 2
    assert err["desc"].startswith("stream info: ") and "does not exist" in err["desc"]


def test_usage_errors_are_one_line_too(cli: Cli) -> None:
    r = cli("stream", "create", "-path", unique_path(), "-bogus", "1")
    line = one_error_line(r)
    assert line.startswith("ERROR (22) - stream create: ") and "-bogus" in line, line
    assert r.code == 2
    r = cli("stream", "create", "-path", unique_path(), "-bogus", "1", "-json")
    assert r.code == 2 and r.stderr == ""
    doc = json.loads(r.stdout)
    assert doc["status"] == "ERROR" and "-bogus" in doc["errors"][0]["desc"]
    assert "timestamp" in doc


def test_success_exit_zero_and_error_exit_nonzero_as_a_process(clusters: EphemeralClusters) -> None:
    path = unique_path()
    ok = run_proc(["stream", "create", "-path", path])
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    bad = run_proc(["stream", "create", "-path", path])
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert re.fullmatch(r"ERROR \(17\) - stream create: stream .* already exists.*\n", bad.stderr)


def test_edit_when_a_kafka_topic_went_missing(cli: Cli, clusters: EphemeralClusters) -> None:
    # Someone deleted a stream's Kafka topic behind streamrepl's back: the stream can still be edited.
    path = unique_path()
    assert cli("stream", "create", "-path", path).code == 0
    for t in ("gone", "kept"):
        assert cli("stream", "topic", "create", "-path", path, "-topic", t).code == 0
    rows = {r["topic"]: r["kafkatopic"] for r in cli("stream", "topic", "list", "-path", path, "-json").data()}
    admin = AdminClient({"bootstrap.servers": clusters.brokers["sanfrancisco"].bootstrap})
    admin.delete_topics([rows["gone"]])[rows["gone"]].result(10)
    r = cli("stream", "edit", "-path", path, "-ttl", "60")
    assert (r.code, r.stderr) == (0, ""), r
    assert topic_configs(clusters, "sanfrancisco", rows["kept"]).get("retention.ms") == "60000"


def test_output_into_a_closed_pipe_is_quiet(clusters: EphemeralClusters) -> None:
    # `streamrepl stream list | head -1`: the reader leaving early is not an error to report.
    assert run_proc(["stream", "create", "-path", unique_path()]).returncode == 0
    import os
    import subprocess

    from support.cli import STREAMREPL_BIN

    r, w = os.pipe()
    os.close(r)  # nobody will read
    proc = subprocess.Popen([STREAMREPL_BIN, "stream", "list"], stdout=w, stderr=subprocess.PIPE, text=True)
    os.close(w)
    _, err = proc.communicate(timeout=60)
    assert err == ""
    assert proc.returncode == 141  # as if killed by SIGPIPE, like other Unix tools


def test_delete_while_a_topic_goes_away(cli: Cli, clusters: EphemeralClusters, monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic deleted by someone else between listing and deleting does not stop the stream's deletion."""
    from streamrepl import kafka
    from streamrepl.errors import NotFound

    path = unique_path()
    assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "topic", "create", "-path", path, "-topic", "t").code == 0
    kt = cli("stream", "topic", "list", "-path", path, "-json").data()[0]["kafkatopic"]
    real, real_delete = kafka.topics, kafka.delete_topics
    ghost = kt[:-1] + "ghost"
    deletions: list[list[str]] = []

    def listing_with_a_ghost(cluster: object, *a: object, **kw: object) -> dict[str, int]:
        out = dict(real(cluster, *a, **kw))  # type: ignore[arg-type]
        if not deletions:
            out[ghost] = 1  # listed, but gone by the time it is deleted
        return out

    def delete_like_kafka(cluster: object, names: list[str]) -> None:
        deletions.append(names)
        # Apache Kafka refuses to delete a topic it does not have (Tansu says nothing).
        if ghost in names:
            real_delete(cluster, [n for n in names if n != ghost])  # type: ignore[arg-type]
            raise NotFound(f"Kafka topic '{ghost}' does not exist")
        real_delete(cluster, names)  # type: ignore[arg-type]

    monkeypatch.setattr(kafka, "topics", listing_with_a_ghost)
    monkeypatch.setattr(kafka, "delete_topics", delete_like_kafka)
    r = cli("stream", "delete", "-path", path)
    assert (r.code, r.stderr) == (0, ""), r
    assert deletions and ghost in deletions[0]
    monkeypatch.undo()
    assert path not in listed(cli)
