"""The bad-input corpus: malformed command lines, registry files and ACEs, each run through the CLI.

Every case must end with a non-zero exit, exactly one line on stderr (or, with -json, the JSON
error envelope on stdout and nothing on stderr), no traceback, and no change to the neither to what `stream list -json` shows, nor to the Kafka topics, nor a single
record more in the metadata topic.

Placeholders in the arguments: {S} is a stream made for this module (topic `t`, 2 partitions,
admin and topic permissions for its creator only), {NEW} and {NEW2} are paths no stream has,
{REG:<name>} is a registry file written for this module, {ME} is the OS user.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from support import STREAMREPL_BIN, Run, kill_broker, run_cli, unique_path

from streamrepl.ace import current_identity
from streamrepl.local import EphemeralClusters
from streamrepl.paths import METADATA_TOPIC

ALICE = (("STREAMREPL_IDENTITY", "user=alice;groups=qa"),)
SECRET = "hunter2-planted"


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    expect: str  # a regular expression the error message must match (case-insensitive)
    env: tuple[tuple[str, str], ...] = ()
    offline: bool = False  # runs as its own process against a broker that does not answer
    skip_as_root: bool = False

    @property
    def json(self) -> bool:
        return "-json" in self.args or "--json" in self.args


def c(id: str, *args: str, expect: str, **kw: Any) -> Any:
    return pytest.param(Case(id, args, expect, **kw), id=id)


DEEP = "(" * 100 + "u:a" + ")" * 100
HUGE = "|".join(f"u:user{i}" for i in range(8000))  # > 64 KiB

CASES = [
    # -- paths ---------------------------------------------------------------------------------
    c("path-relative", "stream", "create", "-path", "activity", expect="must start with '/'"),
    c("path-empty", "stream", "create", "-path", "", expect="missing -path"),
    c("path-blank", "stream", "create", "-path", "   ", expect="empty stream path|missing -path"),
    c("path-double-slash", "stream", "create", "-path", "/sanfrancisco//x", expect="empty segment"),
    c("path-trailing-slash", "stream", "create", "-path", "{NEW}/", expect="empty segment"),
    c("path-cluster-only", "stream", "create", "-path", "/sanfrancisco", expect="no stream"),
    c("path-mapr-cluster-only", "stream", "create", "-path", "/mapr/newyork", expect="no stream"),
    c("path-unknown-cluster", "stream", "create", "-path", "/mapr/atlantis/x", expect="unknown cluster 'atlantis'"),
    c("path-name-with-colon", "stream", "create", "-path", "{NEW}:clicks", expect="cannot contain ':'"),
    c("path-name-with-colon-deep", "stream", "create", "-path", "/sanfrancisco/with:/to/s:x", expect="contains ':'"),
    c("path-newline", "stream", "create", "-path", "{NEW}\nx", expect=r"control character"),
    c("path-tab", "stream", "create", "-path", "/sanfrancisco/a\tb", expect="control character"),
    c("path-dotdot", "stream", "create", "-path", "/sanfrancisco/a/../b", expect=r"'\.\.'"),
    c("path-dot", "stream", "create", "-path", "/sanfrancisco/./b", expect=r"'\.'"),
    c("path-too-long", "stream", "create", "-path", "/sanfrancisco/" + "x" * 300, expect="too long"),
    c("info-path-with-topic", "stream", "info", "-path", "{S}:t", expect="contains ':'"),
    # -- streams that exist / do not exist -----------------------------------------------------
    c("create-exists", "stream", "create", "-path", "{S}", expect="already exists"),
    c("create-exists-mapr-form", "stream", "create", "-path", "/mapr{S}", expect="already exists"),
    c("copymetafrom-missing", "stream", "create", "-path", "{NEW}", "-copymetafrom", "{NEW2}", expect="does not exist"),
    c("copymetafrom-malformed", "stream", "create", "-path", "{NEW}", "-copymetafrom", "x/y", expect="must start with '/'"),
    c("copymetafrom-unknown-cluster", "stream", "create", "-path", "{NEW}", "-copymetafrom", "/mapr/atlantis/s", expect="unknown cluster"),
    c("edit-missing", "stream", "edit", "-path", "{NEW}", "-ttl", "5", expect="does not exist"),
    c("delete-missing", "stream", "delete", "-path", "{NEW}", expect="does not exist"),
    c("info-missing", "stream", "info", "-path", "{NEW}", expect="does not exist"),
    c("list-unknown-cluster", "stream", "list", "-cluster", "atlantis", expect="unknown cluster 'atlantis'"),
    c("local-up-no-cluster", "local", "up", "-clusters", " , ", "-dir", "{TMP}/local", expect="names no cluster"),
    c("local-up-bad-name", "local", "up", "-clusters", "a b", "-dir", "{TMP}/local", expect="invalid cluster name 'a b'"),
    c("local-up-dir-is-file", "local", "up", "-clusters", "x", "-dir", "{REG:invalid}", expect="is a file"),
    c("local-status-dir-is-file", "local", "status", "-dir", "{REG:invalid}", expect="is a file"),
    c("local-down-dir-is-file", "local", "down", "-dir", "{REG:invalid}", expect="is a file"),
    c("cluster-list-timeout-negative", "cluster", "list", "-timeout", "-1", expect="-timeout"),
    c("cluster-list-timeout-zero", "cluster", "list", "-timeout", "0", expect="-timeout"),
    c("cluster-list-timeout-nan", "cluster", "list", "-timeout", "nan", expect="-timeout"),
    c("cluster-list-timeout-inf", "cluster", "list", "-timeout", "inf", expect="-timeout"),
    c("cluster-list-timeout-word", "cluster", "list", "-timeout", "soon", expect="not a valid float"),
    # -- option values -------------------------------------------------------------------------
    c("ttl-negative", "stream", "create", "-path", "{NEW}", "-ttl", "-5", expect="negative"),
    c("ttl-not-integer", "stream", "create", "-path", "{NEW}", "-ttl", "abc", expect="not a valid integer"),
    c("ttl-float", "stream", "create", "-path", "{NEW}", "-ttl", "1.5", expect="not a valid integer"),
    c("ttl-too-large", "stream", "create", "-path", "{NEW}", "-ttl", "99999999999999999999", expect="too large"),
    c("partitions-zero", "stream", "create", "-path", "{NEW}", "-defaultpartitions", "0", expect="at least 1"),
    c("partitions-negative", "stream", "create", "-path", "{NEW}", "-defaultpartitions", "-3", expect="at least 1"),
    c("partitions-not-integer", "stream", "create", "-path", "{NEW}", "-defaultpartitions", "three", expect="not a valid integer"),
    c("partitions-too-large", "stream", "create", "-path", "{NEW}", "-defaultpartitions", "99999999999", expect="too large"),
    c("compression-foo", "stream", "create", "-path", "{NEW}", "-compression", "foo", expect="-compression foo is not supported"),
    c("compression-lzf", "stream", "create", "-path", "{NEW}", "-compression", "lzf", expect="lzf has no Kafka"),
    c("compression-empty", "stream", "create", "-path", "{NEW}", "-compression", "", expect="not supported"),
    c("timestamptype-bad", "stream", "create", "-path", "{NEW}", "-defaulttimestamptype", "eventtime", expect="createtime or logappendtime"),
    c("bool-maybe", "stream", "create", "-path", "{NEW}", "-autocreate", "maybe", expect="not a boolean"),
    c("bool-one", "stream", "create", "-path", "{NEW}", "-autocreate", "1", expect="not a boolean"),
    c("bool-on", "stream", "create", "-path", "{NEW}", "-autocreate", "on", expect="not a boolean"),
    c("bool-empty", "stream", "create", "-path", "{NEW}", "-autocreate", "", expect="not a boolean"),
    c("edit-bool-bad", "stream", "edit", "-path", "{S}", "-compact", "y", expect="not a boolean"),
    c("edit-ttl-negative", "stream", "edit", "-path", "{S}", "-ttl", "-1", expect="negative"),
    c("edit-compression-lzf", "stream", "edit", "-path", "{S}", "-compression", "lzf", expect="lzf"),
    c("edit-mincompactionlag-negative", "stream", "edit", "-path", "{S}", "-mincompactionlag", "-1", expect="negative"),
    c("edit-deleteretention-not-integer", "stream", "edit", "-path", "{S}", "-deleteretention", "1e3", expect="not a valid integer"),
    c("edit-nothing", "stream", "edit", "-path", "{S}", expect="nothing to change"),
    # -- command-line shape --------------------------------------------------------------------
    c("unknown-option", "stream", "create", "-path", "{NEW}", "-bogus", "1", expect="No such option '-bogus'"),
    c("unknown-double-dash-option", "stream", "create", "-path", "{NEW}", "--colour", "red", expect="No such option"),
    c("misspelt-option", "stream", "create", "-pth", "{NEW}", expect="did you mean '-path'"),
    c("compact-not-a-boolean-at-create", "stream", "create", "-path", "{NEW}", "-compact", "maybe", expect="is not a boolean"),
    c("option-without-value", "stream", "create", "-path", expect="requires an argument"),
    c("missing-path", "stream", "create", "-ttl", "5", expect="missing -path"),
    c("missing-path-info", "stream", "info", expect="missing -path"),
    c("extra-argument", "stream", "create", "-path", "{NEW}", "extra", expect="unexpected extra argument"),
    c("unknown-verb", "stream", "frobnicate", expect="No such command"),
    c("no-command", expect="missing command; give one of: .*stream"),
    c("no-verb", "stream", expect="^stream: missing command; give one of: .*create"),
    c("no-topic-verb", "stream", "topic", "-json", expect="^stream topic: "),
    c("option-without-value-names-verb", "stream", "topic", "create", "-path", "{S}", "-topic", expect="^stream topic create: Option '-topic' requires an argument"),
    c("unknown-group", "frobnicate", expect="No such command"),
    # -- ACEs ----------------------------------------------------------------------------------
    c("ace-dangling-and", "stream", "create", "-path", "{NEW}", "-adminperm", "u:bob &", expect="expected a term"),
    c("ace-leading-or", "stream", "create", "-path", "{NEW}", "-produceperm", "| u:bob", expect="expected a term"),
    c("ace-unclosed", "stream", "create", "-path", "{NEW}", "-consumeperm", "(u:bob | g:eng", expect="unclosed"),
    c("ace-unbalanced", "stream", "create", "-path", "{NEW}", "-topicperm", "u:bob)", expect="unbalanced"),
    c("ace-unknown-prefix", "stream", "create", "-path", "{NEW}", "-copyperm", "x:bob", expect="unknown prefix"),
    c("ace-bare-name", "stream", "create", "-path", "{NEW}", "-adminperm", "bob", expect="bare name"),
    c("ace-missing-operator", "stream", "create", "-path", "{NEW}", "-adminperm", "u:bob g:eng", expect="expected '&', '\\|'"),
    c("ace-p-or", "stream", "create", "-path", "{NEW}", "-produceperm", "p | u:bob", expect="cannot be combined"),
    c("ace-p-and", "stream", "create", "-path", "{NEW}", "-topicperm", "g:eng & p", expect="cannot be combined"),
    c("ace-not-p", "stream", "create", "-path", "{NEW}", "-consumeperm", "!p", expect="cannot be combined"),
    c("ace-empty-name", "stream", "create", "-path", "{NEW}", "-adminperm", "u:", expect="expected a user name"),
    c("ace-bad-name", "stream", "create", "-path", "{NEW}", "-adminperm", "u:b*b", expect="expected '&'"),
    c("ace-double-operator", "stream", "create", "-path", "{NEW}", "-adminperm", "u:a || u:b", expect="expected a term"),
    c("ace-empty-parens", "stream", "create", "-path", "{NEW}", "-adminperm", "()", expect="expected a term"),
    c("ace-too-deep", "stream", "create", "-path", "{NEW}", "-adminperm", DEEP, expect="nested deeper"),
    c("ace-too-long", "stream", "create", "-path", "{NEW}", "-adminperm", HUGE, expect="limit is 65536"),
    c("edit-ace-invalid", "stream", "edit", "-path", "{S}", "-adminperm", "u:{ME} |", expect="expected a term"),
    c("edit-ace-p-combined", "stream", "edit", "-path", "{S}", "-consumeperm", "p|g:x", expect="cannot be combined"),
    c("edit-ace-admin-nobody", "stream", "edit", "-path", "{S}", "-adminperm", "u:{ME} & !u:{ME}", expect="-adminperm 'u:.*' passes nobody.*nobody could change or delete"),
    c("edit-ace-admin-two-users", "stream", "edit", "-path", "{S}", "-adminperm", "u:{ME} & u:bob", expect="passes nobody"),
    c("edit-ace-admin-nobody-json", "stream", "edit", "-path", "{S}", "-adminperm", "u:root & !u:root", "-json", expect="passes nobody"),
    c("create-ace-admin-two-users", "stream", "create", "-path", "{NEW}", "-adminperm", "u:alice & u:bob", expect="passes nobody"),
    # -- permissions the ACE denies ------------------------------------------------------------
    c("edit-denied", "stream", "edit", "-path", "{S}", "-ttl", "1", expect="'alice' lacks adminperm", env=ALICE),
    c("edit-ace-denied", "stream", "edit", "-path", "{S}", "-adminperm", "p", expect="lacks adminperm", env=ALICE),
    c("delete-denied", "stream", "delete", "-path", "{S}", expect="lacks adminperm", env=ALICE),
    c("topic-create-denied", "stream", "topic", "create", "-path", "{S}", "-topic", "new", expect="lacks topicperm", env=ALICE),
    c("topic-edit-denied", "stream", "topic", "edit", "-path", "{S}", "-topic", "t", "-partitions", "3", expect="lacks topicperm", env=ALICE),
    c("topic-delete-denied", "stream", "topic", "delete", "-path", "{S}", "-topic", "t", expect="lacks topicperm", env=ALICE),
    c("identity-malformed", "stream", "edit", "-path", "{S}", "-ttl", "1", expect="invalid STREAMREPL_IDENTITY", env=(("STREAMREPL_IDENTITY", "alice"),)),
    # -- topics --------------------------------------------------------------------------------
    c("topic-exists", "stream", "topic", "create", "-path", "{S}", "-topic", "t", expect="already exists"),
    c("topic-name-space", "stream", "topic", "create", "-path", "{S}", "-topic", "bad topic", expect="invalid topic name"),
    c("topic-name-slash", "stream", "topic", "create", "-path", "{S}", "-topic", "a/b", expect="invalid topic name"),
    c("topic-name-colon", "stream", "topic", "create", "-path", "{S}", "-topic", "a:b", expect="invalid topic name"),
    c("topic-name-newline", "stream", "topic", "create", "-path", "{S}", "-topic", "t\n", expect="invalid topic name"),
    c("topic-name-too-long", "stream", "topic", "create", "-path", "{S}", "-topic", "x" * 250, expect="too long"),
    c("topic-name-empty", "stream", "topic", "create", "-path", "{S}", "-topic", "", expect="missing -topic"),
    c("topic-name-missing", "stream", "topic", "create", "-path", "{S}", expect="missing -topic"),
    c("topic-in-path", "stream", "topic", "create", "-path", "{S}:x", "-topic", "x", expect="contains ':'"),
    c("topic-partitions-zero", "stream", "topic", "create", "-path", "{S}", "-topic", "n", "-partitions", "0", expect="at least 1"),
    c("topic-partitions-negative", "stream", "topic", "create", "-path", "{S}", "-topic", "n", "-partitions", "-2", expect="at least 1"),
    c("topic-partitions-not-integer", "stream", "topic", "create", "-path", "{S}", "-topic", "n", "-partitions", "2x", expect="not a valid integer"),
    c("topic-partitions-too-large", "stream", "topic", "create", "-path", "{S}", "-topic", "n", "-partitions", "3000000000", expect="too large"),
    c("topic-partitions-int32-max", "stream", "topic", "create", "-path", "{S}", "-topic", "n", "-partitions", "2147483647", expect="too large: at most 100000"),
    c("topic-edit-partitions-int32-max", "stream", "topic", "edit", "-path", "{S}", "-topic", "t", "-partitions", "2147483647", expect="too large: at most 100000"),
    c("defaultpartitions-int32-max", "stream", "create", "-path", "{NEW}", "-defaultpartitions", "2147483647", expect="too large: at most 100000"),
    c("consume-offset-beyond-int64", "consume", "-path", "{S}:t", "-offset", "99999999999999999999", expect="-offset .*too large"),
    c("consume-offset-beyond-int64-json", "consume", "-path", "{S}:t", "-offset", "99999999999999999999", "-json", expect="-offset .*too large"),
    c("local-up-dir-in-proc", "local", "up", "-clusters", "x", "-dir", "/proc/foo", expect="cannot create the directory /proc/foo"),
    c("topic-timestamptype-bad", "stream", "topic", "create", "-path", "{S}", "-topic", "n", "-timestamptype", "now", expect="createtime or logappendtime"),
    c("topic-stream-missing", "stream", "topic", "create", "-path", "{NEW}", "-topic", "t", expect="does not exist"),
    c("topic-edit-fewer-partitions", "stream", "topic", "edit", "-path", "{S}", "-topic", "t", "-partitions", "1", expect="fewer than the 2"),
    c("topic-edit-zero-partitions", "stream", "topic", "edit", "-path", "{S}", "-topic", "t", "-partitions", "0", expect="at least 1"),
    c("topic-edit-nothing", "stream", "topic", "edit", "-path", "{S}", "-topic", "t", expect="nothing to change"),
    c("topic-edit-timestamptype-bad", "stream", "topic", "edit", "-path", "{S}", "-topic", "t", "-timestamptype", "x", expect="createtime or logappendtime"),
    c("topic-edit-missing", "stream", "topic", "edit", "-path", "{S}", "-topic", "nope", "-partitions", "3", expect="does not exist"),
    c("topic-delete-missing", "stream", "topic", "delete", "-path", "{S}", "-topic", "nope", expect="does not exist"),
    c("topic-info-missing", "stream", "topic", "info", "-path", "{S}", "-topic", "nope", expect="does not exist"),
    c("topic-list-stream-missing", "stream", "topic", "list", "-path", "{NEW}", expect="does not exist"),
    # -- registry files ------------------------------------------------------------------------
    c("registry-missing", "-clusters", "{REG:missing}", "stream", "list", expect="does not exist"),
    c("registry-missing-env", "stream", "list", expect="does not exist", env=(("STREAMREPL_CLUSTERS", "/nonexistent/clusters.yaml"),)),
    c("registry-missing-verb-option", "stream", "info", "-path", "{S}", "-clusters", "{REG:missing}", expect="does not exist"),
    c("registry-directory", "-clusters", "{REG:directory}", "stream", "list", expect="cannot be read"),
    c("registry-unreadable", "-clusters", "{REG:unreadable}", "stream", "list", expect="cannot be read", skip_as_root=True),
    c("registry-invalid-yaml", "-clusters", "{REG:invalid}", "stream", "list", expect="not valid YAML at line"),
    c("registry-tabs", "-clusters", "{REG:tabs}", "stream", "list", expect="not valid YAML"),
    c("registry-not-utf8", "-clusters", "{REG:binary}", "stream", "list", expect="not UTF-8"),
    c("registry-empty", "-clusters", "{REG:empty}", "stream", "list", expect="'clusters:' section"),
    c("registry-scalar", "-clusters", "{REG:scalar}", "stream", "list", expect="'clusters:' section"),
    c("registry-no-clusters", "-clusters", "{REG:noclusters}", "stream", "list", expect="'clusters:' section"),
    c("registry-clusters-empty", "-clusters", "{REG:clustersempty}", "stream", "list", expect="'clusters:' section"),
    c("registry-clusters-list", "-clusters", "{REG:clusterslist}", "stream", "list", expect="'clusters:' section"),
    c("registry-no-bootstrap", "-clusters", "{REG:nobootstrap}", "stream", "list", expect="needs a 'bootstrap.servers'"),
    c("registry-empty-bootstrap", "-clusters", "{REG:emptybootstrap}", "stream", "list", expect="empty 'bootstrap.servers'"),
    c("registry-cluster-not-mapping", "-clusters", "{REG:notmapping}", "stream", "list", expect="needs a 'bootstrap.servers'"),
    c("registry-nested-property", "-clusters", "{REG:nested}", "stream", "list", expect="must be a single value"),
    c("registry-bad-cluster-name", "-clusters", "{REG:badname}", "stream", "list", expect="cluster name 'a/b'"),
    c("registry-default-unknown", "-clusters", "{REG:baddefault}", "stream", "list", expect="default cluster 'atlantis'"),
    c("registry-unknown-property", "-clusters", "{REG:unknownprop}", "stream", "list", expect="No such configuration property"),
    c("registry-unknown-property-named", "-clusters", "{REG:unknownprop}", "stream", "list", expect="property 'no.such.property' of cluster 'sanfrancisco'.*registry"),
    c("registry-bad-value", "-clusters", "{REG:badvalue}", "stream", "list", expect="property 'acks' of cluster 'sanfrancisco'.*Invalid value"),
    c("registry-bad-value-json", "-clusters", "{REG:badvalue}", "stream", "list", "-json", expect="property 'acks' of cluster"),
    c("registry-out-of-range", "-clusters", "{REG:outofrange}", "stream", "list", expect="property 'linger.ms' of cluster 'sanfrancisco'.*outside allowed range"),
    c("registry-nested-20000-deep", "-clusters", "{REG:deep}", "stream", "list", expect="nested deeper than .* at line 3"),
    c("registry-nested-mappings", "-clusters", "{REG:deepmap}", "stream", "list", expect="nested deeper than"),
    c("registry-list-as-cluster-name", "-clusters", "{REG:listkey}", "stream", "list", expect="a list is used as a name at line 2"),
    c("registry-mapping-as-cluster-name", "-clusters", "{REG:mapkey}", "stream", "list", expect="a mapping is used as a name at line 2"),
    c("registry-list-as-property-name", "-clusters", "{REG:propkey}", "stream", "list", expect="a list is used as a name at line 3"),
    # As processes of their own, killed after a while: in the tests' process a hang would stop the run.
    c("registry-dev-zero", "-clusters", "/dev/zero", "stream", "list", expect="cannot be read: it is a character device, not a file", offline=True),
    c("registry-fifo", "-clusters", "{REG:fifo}", "stream", "list", expect="cannot be read: it is a FIFO, not a file", offline=True),
    c("registry-too-large", "-clusters", "{REG:huge}", "stream", "list", expect="too large .*at most 4 MiB"),
    # -- numbers past what Kafka takes ---------------------------------------------------------
    c("produce-partition-beyond-int32", "produce", "-path", "{S}:t", "-partition", "9999999999", expect="-partition 9999999999 is too large"),
    c("consume-partition-beyond-int32", "consume", "-path", "{S}:t", "-partition", "9999999999", expect="-partition 9999999999 is too large"),
    c("consume-timestamp-beyond-int64", "consume", "-path", "{S}:t", "-timestamp", "9223372036854775808", expect="-timestamp 9223372036854775808 is too large"),
    c("consume-timestamp-beyond-int64-json", "consume", "-path", "{S}:t", "-timestamp", "99999999999999999999", "-json", expect="-timestamp .* is too large"),
    # -- with -json: the error envelope on stdout instead ---------------------------------------
    c("json-exists", "stream", "create", "-path", "{S}", "-json", expect="already exists"),
    c("json-ace", "stream", "create", "-path", "{NEW}", "-adminperm", "p|u:x", "-json", expect="cannot be combined"),
    c("json-usage", "stream", "create", "-path", "{NEW}", "-bogus", "1", "-json", expect="No such option '-bogus'"),
    c("json-before-verb", "-json", "stream", "info", "-path", "{NEW}", expect="does not exist"),
    c("json-registry", "stream", "list", "-json", "-clusters", "{REG:invalid}", expect="not valid YAML"),
    c("json-denied", "stream", "delete", "-path", "{S}", "-json", expect="lacks adminperm", env=ALICE),
    c("json-path-newline", "stream", "create", "-path", "{NEW}\n", "-json", "-ttl", "-1", expect="negative"),
    # -- brokers that do not answer (run as processes, side by side) ----------------------------
    c("dead-list", "-clusters", "{REG:dead}", "stream", "list", expect="does not answer", offline=True),
    c("dead-create", "-clusters", "{REG:dead}", "stream", "create", "-path", "/dead/x", expect="does not answer", offline=True),
    c("dead-info", "-clusters", "{REG:dead}", "stream", "info", "-path", "/dead/x", expect="does not answer", offline=True),
    c("dead-topic-create", "-clusters", "{REG:dead}", "stream", "topic", "create", "-path", "/dead/x", "-topic", "t", expect="does not answer", offline=True),
    c("dead-json", "-clusters", "{REG:dead}", "stream", "info", "-path", "/dead/x", "-json", expect="does not answer", offline=True),
    c("stalled-list", "-clusters", "{REG:stalled}", "stream", "list", expect="does not answer", offline=True),
    c("stalled-create", "-clusters", "{REG:stalled}", "stream", "create", "-path", "/stalled/x", expect="does not answer", offline=True),
]  # fmt: skip


# -- fixtures -----------------------------------------------------------------------------------
def write_registries(d: Path, good: Path) -> dict[str, Path]:
    closed = _closed_port()
    texts = {
        "invalid": "clusters: [\n  a: {\n",
        "tabs": "clusters:\n\ta:\n\t\tbootstrap.servers: x\n",
        "empty": "",
        "scalar": "just a string\n",
        "noclusters": "default: sanfrancisco\n",
        "clustersempty": "clusters: {}\n",
        "clusterslist": "clusters:\n  - sanfrancisco\n",
        "nobootstrap": "clusters:\n  a:\n    security.protocol: SSL\n",
        "emptybootstrap": "clusters:\n  a:\n    bootstrap.servers: ''\n",
        "notmapping": "clusters:\n  a: 127.0.0.1:9092\n",
        "nested": "clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:1\n    ssl:\n      ca: x\n",
        "badname": "clusters:\n  a/b:\n    bootstrap.servers: 127.0.0.1:1\n",
        "baddefault": "default: atlantis\nclusters:\n  a:\n    bootstrap.servers: 127.0.0.1:1\n",
        "unknownprop": good.read_text().replace("bootstrap.servers:", "no.such.property: 1\n    bootstrap.servers:", 1),
        "badvalue": good.read_text().replace("bootstrap.servers:", "acks: banana\n    bootstrap.servers:", 1),
        "outofrange": good.read_text().replace("bootstrap.servers:", "linger.ms: -5\n    bootstrap.servers:", 1),
        "deep": "clusters:\n  a:\n    bootstrap.servers: " + "[" * 20_000 + "]" * 20_000 + "\n",
        "deepmap": "clusters: " + "{a: " * 20_000 + "1" + "}" * 20_000 + "\n",
        "listkey": "clusters:\n  [a, b]:\n    bootstrap.servers: 127.0.0.1:1\n",
        "mapkey": "clusters:\n  ? {a: 1}\n  : bootstrap.servers: 127.0.0.1:1\n",
        "propkey": "clusters:\n  a:\n    [x]: 1\n    bootstrap.servers: 127.0.0.1:1\n",
        "huge": "clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:1\n" + ("#" * 1023 + "\n") * 5 * 1024,
        "dead": (
            f"clusters:\n  dead:\n    bootstrap.servers: 127.0.0.1:{closed}\n"
            "    security.protocol: SASL_PLAINTEXT\n    sasl.mechanisms: PLAIN\n"
            f"    sasl.username: op\n    sasl.password: {SECRET}\n"
        ),
    }
    out = {name: d / f"{name}.yaml" for name in texts}
    for name, text in texts.items():
        out[name].write_text(text)
    out["binary"] = d / "binary.yaml"
    out["binary"].write_bytes(b"\xff\xfe\x00\x01clusters")
    out["missing"] = d / "missing.yaml"
    out["directory"] = d / "adir.yaml"
    out["directory"].mkdir()
    out["fifo"] = d / "fifo.yaml"
    os.mkfifo(out["fifo"], 0o600)  # nothing ever writes to it: reading it would wait forever
    out["unreadable"] = d / "unreadable.yaml"
    out["unreadable"].write_text(good.read_text())
    out["unreadable"].chmod(0)
    for p in out.values():
        if p.is_file() and p.name != "unreadable.yaml":
            p.chmod(0o600)
    return out


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nothing listens there


@dataclass
class Corpus:
    clusters: EphemeralClusters
    stream: str
    registries: dict[str, Path]
    me: str
    offline: Any = None
    last: Any = None
    _clients: dict[str, tuple[AdminClient, Consumer]] = field(default_factory=dict)

    def expand(self, case: Case) -> list[str]:
        new, new2 = unique_path(stem="new"), unique_path("newyork", stem="new")
        out = []
        for a in case.args:
            a = a.replace("{S}", self.stream).replace("{NEW2}", new2).replace("{NEW}", new)
            a = a.replace("{ME}", self.me).replace("{TMP}", str(self.registries["missing"].parent))
            for m in re.finditer(r"\{REG:(\w+)\}", a):
                a = a.replace(m.group(0), str(self.registries[m.group(1)]))
            out.append(a)
        return out

    def snapshot(self) -> Any:
        """Everything a failed command must leave as it was, as the operator and the broker see it."""
        r = run_cli("stream", "list", "-json")
        assert r.code == 0, r
        listing = r.data()
        topics, ends = {}, {}
        for name, b in self.clusters.brokers.items():
            if name not in self._clients:
                self._clients[name] = (
                    AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0}),
                    Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bad-input-snapshot", "log_level": 0}),
                )
            admin, consumer = self._clients[name]
            md = admin.list_topics(timeout=10)
            topics[name] = sorted((t, len(m.partitions)) for t, m in md.topics.items())
            # Any record written to the metadata topic moves its high watermark (even on Tansu,
            # whose watermark is the base offset of the last batch + 1).
            ends[name] = (
                consumer.get_watermark_offsets(TopicPartition(METADATA_TOPIC, 0), timeout=10, cached=False)
                if METADATA_TOPIC in md.topics
                else None
            )
        return listing, topics, ends

    def close(self) -> None:
        for _, consumer in self._clients.values():
            consumer.close()
        self._clients.clear()  # let the admin clients go, so that the brokers can stop at once


class Offline:
    """The cases against brokers that do not answer, run as separate processes in the background
    while the other cases run: one registry names a closed port, another a broker frozen with
    SIGSTOP. Starts are staggered so that the interpreters do not all start up at once on a busy
    machine. A case that does not end within a generous timeout is killed (a hang, not slowness:
    how fast a command fails is not asserted here)."""

    def __init__(self, corpus: Corpus, cases: list[Case]):
        self.corpus, self.cases = corpus, cases
        self.results: dict[str, Run] = {}
        self.procs: list[subprocess.Popen[str]] = []
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        waiters = []
        for case in self.cases:
            if self.stopping:
                break
            env = dict(os.environ, **dict(case.env))
            proc = subprocess.Popen(
                [STREAMREPL_BIN, *self.corpus.expand(case)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self.procs.append(proc)
            waiters.append(threading.Thread(target=self._wait, args=(case.id, proc)))
            waiters[-1].start()
            time.sleep(0.4)
        for w in waiters:
            w.join()

    def _wait(self, cid: str, proc: subprocess.Popen[str]) -> None:
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        self.results[cid] = Run(proc.returncode, out, err)

    def result(self, cid: str) -> Run:
        self.thread.join(timeout=120)
        return self.results[cid]

    def stop(self) -> None:
        """Kill what still runs (when only some cases were selected) and wait for the rest."""
        self.stopping = True
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def corpus(clusters: EphemeralClusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    me = current_identity().user
    stream = unique_path(stem="victim")
    assert run_cli("stream", "create", "-path", stream, "-ttl", "3600").code == 0
    assert run_cli("stream", "topic", "create", "-path", stream, "-topic", "t", "-partitions", "2").code == 0
    regs = write_registries(tmp_path_factory.mktemp("registries"), clusters.registry_path)
    corpus = Corpus(clusters, stream, regs, me)
    # A broker of its own: it is frozen for the whole module, which the shared ones must never be.
    with EphemeralClusters(["stalled"]) as stalled:
        regs["stalled"] = stalled.registry_path
        stalled.freeze("stalled")  # thawed again when the context ends
        corpus.offline = Offline(corpus, [p.values[0] for p in CASES if p.values[0].offline])
        try:
            yield corpus
        finally:
            corpus.offline.stop()
            corpus.close()
            # Frozen with clients connected, it would wait for them on SIGTERM; it holds nothing worth
            # a clean stop.
            kill_broker(stalled, "stalled")


def assert_one_clear_error(case: Case, run: Run) -> str:
    assert run.code not in (0, None), f"exit status {run.code}: {run}"
    assert "Traceback" not in run.stdout + run.stderr, run.stderr
    if case.json:
        assert run.stderr == "", f"stderr with -json: {run.stderr!r}"
        assert len(run.stdout.splitlines()) == 1, run.stdout
        doc = json.loads(run.stdout)
        assert doc["status"] == "ERROR", doc
        [err] = doc["errors"]
        assert isinstance(err["id"], int) and err["id"] > 0
        assert isinstance(doc.get("timestamp"), int)
        return str(err["desc"])
    assert run.stdout == "", f"stdout on error: {run.stdout!r}"
    lines = run.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    m = re.fullmatch(r"ERROR \((\d+)\) - (.+)", lines[0])
    assert m, lines[0]
    assert int(m.group(1)) > 0
    return m.group(2)


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case: Case, corpus: Corpus) -> None:
    if case.skip_as_root and os.geteuid() == 0:
        pytest.skip("root reads any file; the directory case covers an unreadable registry")
    if corpus.last is None:
        corpus.last = corpus.snapshot()
    if case.offline:
        run = corpus.offline.result(case.id)
    else:
        run = run_cli(corpus.expand(case), env=dict(case.env))
    message = assert_one_clear_error(case, run)
    assert re.search(case.expect, message, re.IGNORECASE), f"{message!r} does not say {case.expect!r}"
    assert SECRET not in run.stdout + run.stderr
    after = corpus.snapshot()
    before, corpus.last = corpus.last, after
    assert after[0] == before[0], "stream list changed"
    assert after[1] == before[1], "Kafka topics changed"
    assert after[2] == before[2], "a metadata record was written"


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60
    assert len({p.values[0].id for p in CASES}) == len(CASES)


def test_usage_error_for_every_verb_is_one_line(corpus: Corpus) -> None:
    """Every command of the stream and cluster groups refuses an unknown option on one line."""
    from streamrepl.cli import cli

    verbs: list[list[str]] = []
    for group in ("stream", "cluster"):
        g = cli.get_command(None, group)  # type: ignore[arg-type]
        for name in g.list_commands(None):  # type: ignore[union-attr,arg-type]
            sub = g.get_command(None, name)  # type: ignore[union-attr,arg-type]
            if hasattr(sub, "list_commands"):
                verbs += [[group, name, v] for v in sub.list_commands(None)]
            else:
                verbs.append([group, name])
    assert ["stream", "create"] in verbs and ["stream", "topic", "create"] in verbs
    for verb in verbs:
        run = run_cli(*verb, "-nosuchoption", "x")
        case = Case("-".join(verb), tuple(verb), "No such option")
        assert "No such option '-nosuchoption'" in assert_one_clear_error(case, run), verb
