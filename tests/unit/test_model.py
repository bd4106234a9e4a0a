"""The typed stream metadata (model.py) against the JSON the metadata store keeps: no broker."""

from __future__ import annotations

import json
from typing import Any

from streamrepl.model import Aces, Replica, ReplicaState, Settings, Stream, Topic, Upstream

#: A record as the code before the types wrote it (metastore.py's json.dumps(..., sort_keys=True)) after
#: `stream create`, `topic create`, a topic adopted from a plain Kafka client, `replica add` and `upstream add`.
STORED = (
    '{"adminperm": "u:alice", "autocreate": true, "cluster": "sanfrancisco", "compact": false,'
    ' "compression": "inherit", "consumeperm": "u:alice", "copyperm": "u:alice", "created": 1718000000000,'
    ' "creator": "alice", "defaultpartitions": 1, "defaulttimestamptype": "createtime",'
    ' "deleteretention": 86400000, "mincompactionlag": 0, "path": "/orders", "produceperm": "u:alice",'
    ' "replicas": [{"added": 1718000000500, "cluster": "newyork", "idx": 1, "networkcompression": "lz4",'
    ' "networkencryption": false, "path": "/newyork/orders", "paused": false, "state": "REPLICA_STATE_REPLICATING",'
    ' "stream": "/orders", "synchronous": false, "throttle": false, "uuid": "9b7c"}],'
    ' "topicperm": "u:alice", "topics": {"clicks": {"partitions": 3, "timestamptype": "createtime"},'
    ' "stray": {"adopted": true, "partitions": 2, "timestamptype": "createtime"}}, "ttl": 604800,'
    ' "updated": 1718000000900, "upstreams": [{"cluster": "tokyo", "idx": 1, "path": "/tokyo/orders",'
    ' "stream": "/orders", "uuid": "77aa"}], "uuid": "3f2e", "version": 6}'
)


def stored(rec: Stream) -> str:
    """The JSON text the metadata store writes for `rec`."""
    return json.dumps(rec.to_json(), sort_keys=True)


def test_a_stored_record_reads_into_the_types_and_writes_back_unchanged() -> None:
    rec = Stream.from_json(json.loads(STORED))
    assert stored(rec) == STORED
    assert (rec.path, rec.cluster, rec.uuid, rec.creator, rec.created, rec.version) == (
        "/orders",
        "sanfrancisco",
        "3f2e",
        "alice",
        1718000000000,
        6,
    )
    assert rec.settings == Settings()  # the defaults `stream create` wrote
    assert rec.aces == Aces("u:alice", "u:alice", "u:alice", "u:alice", "u:alice")
    assert rec.topics == {"clicks": Topic(3), "stray": Topic(2, adopted=True)}
    assert rec.replicas == [
        Replica(
            path="/newyork/orders",
            cluster="newyork",
            stream="/orders",
            uuid="9b7c",
            idx=1,
            added=1718000000500,
        )
    ]
    assert rec.replicas[0].state is ReplicaState.REPLICATING
    assert rec.upstream("/tokyo/orders") == Upstream("/tokyo/orders", "tokyo", "/orders", "77aa", 1)
    assert rec.copylock is None and rec.extra == {}


def test_an_edit_changes_only_what_it_edits() -> None:
    rec = Stream.from_json(json.loads(STORED))
    rec.settings.ttl = 60
    rec.topics["clicks"].partitions = 4
    rec.replicas[0].paused = True
    want = json.loads(STORED)
    want["ttl"] = 60
    want["topics"]["clicks"]["partitions"] = 4
    want["replicas"][0]["paused"] = True
    assert rec.to_json() == want


def test_keys_this_version_does_not_know_survive_an_update() -> None:
    newer: dict[str, Any] = json.loads(STORED)
    newer["quota"] = {"bytes": 10}
    newer["topics"]["clicks"]["schema"] = "v2"
    newer["replicas"][0]["lagalarm"] = 5000
    newer["upstreams"][0]["weight"] = 2
    rec = Stream.from_json(newer)
    assert rec.extra == {"quota": {"bytes": 10}}
    assert rec.topics["clicks"].extra == {"schema": "v2"}
    rec.settings.compact = True
    rec.upstreams[0].idx = 3
    out = rec.to_json()
    assert out["quota"] == {"bytes": 10} and out["topics"]["clicks"]["schema"] == "v2"
    assert out["replicas"][0]["lagalarm"] == 5000 and out["upstreams"][0] == {**newer["upstreams"][0], "idx": 3}
    assert out["compact"] is True


def test_a_state_only_a_newer_writer_knows_is_kept_as_written() -> None:
    entry = Replica.from_json({"path": "/ny/s", "state": "REPLICA_STATE_SOMETHING_NEW"})
    assert entry.state == "REPLICA_STATE_SOMETHING_NEW" and not isinstance(entry.state, ReplicaState)
    assert entry.to_json() == {"path": "/ny/s", "state": "REPLICA_STATE_SOMETHING_NEW"}


def test_records_written_before_a_field_existed_read_its_default_and_keep_lacking_it() -> None:
    old: dict[str, Any] = json.loads(STORED)
    for key in ("compact", "mincompactionlag", "deleteretention", "upstreams"):
        del old[key]
    del old["replicas"][0]["state"]
    del old["replicas"][0]["synchronous"]
    del old["topics"]["clicks"]["timestamptype"]
    rec = Stream.from_json(old)
    assert (rec.settings.compact, rec.settings.mincompactionlag, rec.settings.deleteretention) == (False, 0, 86400000)
    assert rec.upstreams == []
    assert rec.replicas[0].state is ReplicaState.REPLICATING  # entries from before states replicate
    assert rec.replicas[0].synchronous is False
    assert rec.topics["clicks"].timestamptype == "createtime"
    assert rec.to_json() == old  # read and written back: unchanged
    rec.settings.compact = True
    rec.replicas[0].state = ReplicaState.ERROR
    assert rec.to_json() == {
        **old,
        "compact": True,
        "replicas": [{**old["replicas"][0], "state": "REPLICA_STATE_ERROR"}],
    }


def test_new_entries_are_written_as_before() -> None:
    """The flag of adopted topics and the copy lock are written only when set, as the code before the types did."""
    assert Topic(partitions=2, timestamptype="logappendtime").to_json() == {
        "partitions": 2,
        "timestamptype": "logappendtime",
    }
    assert Topic(partitions=2, adopted=True).to_json()["adopted"] is True
    rec = Stream(path="/s", cluster="c", uuid="u", created=1, creator="me")
    out = rec.to_json()
    assert "copylock" not in out and "settings" not in out and "aces" not in out
    assert out["topics"] == {} and out["replicas"] == [] and out["upstreams"] == [] and out["ttl"] == 604800
    rec.copylock = {"owner": "me"}
    assert rec.to_json()["copylock"] == {"owner": "me"}
    assert Stream.from_json(rec.to_json()).copylock == {"owner": "me"}


def test_replica_states_are_their_stored_strings() -> None:
    assert {s.value for s in ReplicaState} == {
        "REPLICA_STATE_REPLICATING",
        "REPLICA_STATE_ERROR",
        "REPLICA_STATE_WAITING_FOR_UPSTREAM",
        "REPLICA_STATE_WAITING_FOR_GATEWAY",
        "REPLICA_STATE_CREATE_SCHEDULE",
        "REPLICA_STATE_COPY_IN_PROGRESS",
    }
    assert (
        str(ReplicaState.ERROR) == "REPLICA_STATE_ERROR" and json.dumps(ReplicaState.ERROR) == '"REPLICA_STATE_ERROR"'
    )


def test_reading_does_not_share_state_with_the_stored_json() -> None:
    raw: dict[str, Any] = json.loads(STORED)
    raw["quota"] = {"bytes": 10}
    rec = Stream.from_json(raw)
    rec.extra["quota"]["bytes"] = 20
    rec.topics["clicks"].partitions = 9
    assert raw["quota"] == {"bytes": 10} and raw["topics"]["clicks"]["partitions"] == 3
