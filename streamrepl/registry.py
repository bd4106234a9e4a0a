"""The cluster registry: streamrepl's counterpart of mapr-clusters.conf.

A YAML file names each cluster and the librdkafka client properties used to reach it.
Secrets in it (SASL passwords, key passwords, tokens) are never printed back: every
place that shows a cluster's properties goes through `masked()` (masking.py decides what is hidden, and how).
"""

from __future__ import annotations

import datetime
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import settings
from .errors import NotFound, RegistryError
from .masking import MASK, address_secrets, is_secret, mask_address

ENV_VAR = settings.CLUSTERS
USER_PATH = Path("~/.config/streamrepl/clusters.yaml")
SYSTEM_PATH = Path("/etc/streamrepl/clusters.yaml")

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"


class _RegistryLoader(yaml.SafeLoader):
    """YAML as a registry needs it:

    - names are text, as YAML 1.2 reads them: YAML 1.1 makes the cluster names `yes` and `on` True, `0123` the
      number 83 and `~` None (so are the names of properties and the `default:` cluster);
    - YAML keeps the last of two equal keys without a word; in a registry that hides a mistake, so it is an
      error (a key that a merge `<<: *base` brings in may be given again: that is what merging is for);
    - a list or mapping is no name.
    """

    def construct_document(self, node: yaml.Node) -> Any:
        self._root = node
        return super().construct_document(node)  # type: ignore[no-untyped-call]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                raise RegistryError(
                    f"a {kind} is used as a name at line {key_node.start_mark.line + 1}; the names of clusters and"
                    " properties are text"
                )
            if key_node.tag == _MERGE:
                continue
            key_node.tag = _STR
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise RegistryError(
                    f"'{key}' is given more than once (line {key_node.start_mark.line + 1}); keep one of them"
                )
            seen.add(key)
            if node is self._root and key == "default" and isinstance(value_node, yaml.ScalarNode):
                value_node.tag = _STR
        self.flatten_mapping(node)  # type: ignore[no-untyped-call]
        for key_node, _ in node.value:  # the keys a merge brought in
            if isinstance(key_node, yaml.ScalarNode):
                key_node.tag = _STR
        return super().construct_mapping(node, deep=deep)


#: Registry properties that are streamrepl's own, not librdkafka's: never given to a Kafka client.
OWN_PREFIX = "streamrepl."
#: `streamrepl.broker`: what the cluster's broker is, where streamrepl must work around it (docs/brokers.md).
BROKER_PROPERTY = "streamrepl.broker"
#: The others override one answer of the broker probes each (kafka/brokers.py, OVERRIDES); `streamrepl.broker` is
#: only a label now, shown by `cluster list`: what a broker does is probed, not assumed from its name.
OWN_PROPERTIES = {
    BROKER_PROPERTY: ("kafka", "tansu", "noida"),
    "streamrepl.watermark.exact": ("true", "false"),
    "streamrepl.fetch.wakes": ("true", "false"),
    "streamrepl.group.static": ("true", "false"),
    "streamrepl.group.leave": ("true", "false"),
}
#: `streamrepl.source.consumers`: how many consumers a gateway reads each of its lanes of this source cluster with
#: (replication/lanes.py: several fetches in flight fill a long link; unset: lanes.SOURCE_CONSUMERS).
SOURCE_CONSUMERS_PROPERTY = "streamrepl.source.consumers"
#: streamrepl's own properties that are whole numbers: their inclusive limits.
OWN_NUMBERS = {SOURCE_CONSUMERS_PROPERTY: (1, 16)}


@dataclass(frozen=True)
class Cluster:
    name: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def client_properties(self) -> dict[str, str]:
        """The properties a Kafka client is given: all but streamrepl's own."""
        return {k: v for k, v in self.properties.items() if not k.startswith(OWN_PREFIX)}

    @property
    def broker(self) -> str:
        """The broker kind the registry names (`streamrepl.broker`), "kafka" when it names none."""
        return self.properties.get(BROKER_PROPERTY, "kafka").lower()

    @property
    def source_consumers(self) -> int | None:
        """`streamrepl.source.consumers` (checked when the registry was read), None when the registry names none."""
        raw = self.properties.get(SOURCE_CONSUMERS_PROPERTY)
        return int(raw) if raw is not None else None

    @property
    def bootstrap(self) -> str:
        return self.properties["bootstrap.servers"]

    @property
    def shown_bootstrap(self) -> str:
        """bootstrap.servers as it may be shown: a password written into an address (user:pw@host) masked."""
        return mask_address(self.bootstrap)

    def __repr__(self) -> str:
        # A cluster in a log line, an assertion or a traceback shows as `cluster list` shows it.
        return f"Cluster(name={self.name!r}, properties={self.masked()!r})"

    def masked(self) -> dict[str, str]:
        shown = {k: (MASK if is_secret(k) else v) for k, v in self.properties.items()}
        if "bootstrap.servers" in shown:
            shown["bootstrap.servers"] = self.shown_bootstrap
        return shown

    def uses_tls(self) -> bool:
        return self.properties.get("security.protocol", "").upper() in ("SSL", "SASL_SSL")

    def secrets(self) -> list[str]:
        found = [v for k, v in self.properties.items() if is_secret(k) and v]
        found += address_secrets(self.properties.get("bootstrap.servers", ""))
        return found


@dataclass(frozen=True)
class Registry:
    path: Path
    default: str
    clusters: dict[str, Cluster]

    def get(self, name: str) -> Cluster:
        try:
            return self.clusters[name]
        except KeyError:
            known = ", ".join(sorted(self.clusters)) or "none"
            raise NotFound(f"unknown cluster '{name}' (known: {known}); add it to the registry {self.path}") from None

    def secrets(self) -> list[str]:
        return [s for c in self.clusters.values() for s in c.secrets()]


def locate(explicit: str | None = None) -> Path:
    """The registry file, in the documented order of precedence."""
    if explicit:
        return Path(explicit).expanduser()
    env = settings.clusters_file()
    if env:
        return env
    user = USER_PATH.expanduser()
    if user.exists():
        return user
    if SYSTEM_PATH.exists():
        return SYSTEM_PATH
    raise RegistryError(
        f"no cluster registry found: set ${ENV_VAR}, pass -clusters FILE, or create {USER_PATH}"
        " (streamrepl local up writes one)"
    )


#: A registry is a few kilobytes; anything much larger is the wrong file, and is not read whole.
MAX_BYTES = 4 * 1024 * 1024
#: How deep a registry nests: clusters > name > property is 3; YAML's own parser recurses per level.
MAX_DEPTH = 16
_KINDS = {
    stat.S_IFDIR: "directory",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFIFO: "FIFO",
    stat.S_IFSOCK: "socket",
}


def _read(path: Path) -> str:
    """The registry's text. Only a regular file is read (a FIFO would block, /dev/zero never end), and only up to
    MAX_BYTES."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise RegistryError(f"cluster registry {path} does not exist; create it or pass -clusters FILE") from None
    except OSError as e:
        raise RegistryError(f"cluster registry {path} cannot be read ({e.strerror}); check its permissions") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = _KINDS.get(stat.S_IFMT(mode), "special file")
        raise RegistryError(
            f"cluster registry {path} cannot be read: it is a {kind}, not a file; pass -clusters FILE naming"
            " the YAML file"
        )
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_BYTES + 1)
        except OSError as e:
            raise RegistryError(f"cluster registry {path} cannot be read ({e.strerror})") from None
    if len(data) > MAX_BYTES:
        raise RegistryError(
            f"cluster registry {path} is too large (a registry holds at most 4 MiB: a few lines per cluster);"
            " is it the right file?"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RegistryError(f"cluster registry {path} is not UTF-8 text; is it the right file?") from None


def load(explicit: str | None = None) -> Registry:
    path = locate(explicit)
    reg = parse(_read(path), path)
    warn_if_world_readable(path, reg)
    return reg


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before YAML builds anything: its composer recurses once per level, and
    `[[[[...` 20,000 deep ends in RecursionError. The event parser that reads it here does not recurse."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = f" at line {event.start_mark.line + 1}" if event.start_mark is not None else ""
                raise RegistryError(
                    f"nested deeper than {MAX_DEPTH} levels{line}; a registry needs three (clusters, a cluster,"
                    " its properties)"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse(text: str, path: Path) -> Registry:
    try:
        _check_depth(text)
        doc = yaml.load(text, Loader=_RegistryLoader)  # noqa: S506 - a SafeLoader
    except RegistryError as e:
        raise RegistryError(f"cluster registry {path}: {e.message}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise RegistryError(f"cluster registry {path} is not valid YAML{where}; fix its syntax") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("clusters"), dict) or not doc["clusters"]:
        raise RegistryError(f"cluster registry {path} must be a mapping with a non-empty 'clusters:' section")
    for key in doc:
        # `x-` keys are not read: they hold templates for merge keys (`x-base: &base`, then `<<: *base`), as in
        # docker-compose files.
        if key not in ("default", "clusters") and not str(key).startswith("x-"):
            raise RegistryError(
                f"unknown top-level entry '{key}' in {path}: only 'default:' and 'clusters:' go there;"
                " is a cluster property indented wrongly? (a template for merge keys goes under a name that"
                " starts with 'x-')"
            )
    clusters: dict[str, Cluster] = {}
    for name, props in doc["clusters"].items():
        name = str(name)
        if not _NAME_RE.fullmatch(name) or name == "mapr":
            raise RegistryError(
                f"cluster name {name!r} in {path} is not valid: use letters, digits, '.', '_' and '-'"
                " (and not 'mapr', which starts /mapr/<cluster>/... paths)"
            )
        if not isinstance(props, dict) or "bootstrap.servers" not in props:
            raise RegistryError(f"cluster '{name}' in {path} needs a 'bootstrap.servers' entry")
        for k, v in props.items():
            odd = _not_a_value(v)
            if odd:
                raise RegistryError(f"property '{k}' of cluster '{name}' in {path} {odd}")
            if is_secret(str(k)) and not isinstance(v, str):
                # YAML turns 012345 into 5349, yes into true, a date into a date: the secret would change unseen.
                raise RegistryError(
                    f"property '{k}' of cluster '{name}' in {path} is not text to YAML, which would change it"
                    " (numbers, dates, yes/no); put the value in quotes"
                )
        for k, v in props.items():
            if str(k).startswith(OWN_PREFIX):
                limits = OWN_NUMBERS.get(str(k))
                if limits is not None:
                    if isinstance(v, bool) or not str(v).strip().isdigit() or not limits[0] <= int(v) <= limits[1]:
                        raise RegistryError(
                            f"property '{k}' of cluster '{name}' in {path} is '{v}'; use a whole number from"
                            f" {limits[0]} to {limits[1]}"
                        )
                    continue
                allowed = OWN_PROPERTIES.get(str(k))
                if allowed is None:
                    raise RegistryError(
                        f"unknown property '{k}' of cluster '{name}' in {path}: streamrepl's own properties are"
                        f" {', '.join([*OWN_PROPERTIES, *OWN_NUMBERS])}"
                    )
                if str(v).lower() not in allowed:
                    raise RegistryError(
                        f"property '{k}' of cluster '{name}' in {path} is '{v}'; use one of {', '.join(allowed)}"
                    )
        if not str(props["bootstrap.servers"]).strip():
            raise RegistryError(f"cluster '{name}' in {path} has an empty 'bootstrap.servers' entry")
        clusters[name] = Cluster(name, {str(k): _scalar(v) for k, v in props.items()})
    default = str(doc.get("default") or next(iter(clusters)))
    if default not in clusters:
        raise RegistryError(f"default cluster '{default}' in {path} is not listed under 'clusters:'")
    return Registry(path=path, default=default, clusters=clusters)


def _not_a_value(v: Any) -> str:
    """What is wrong with a property's value as YAML gave it ("" when it is text, a number or a boolean): YAML's other
    types would reach the Kafka client as Python's text for them (`!!binary aGVsbG8=` as "b'hello'")."""
    if v is None or isinstance(v, dict | list | set | tuple):
        return "must be a single value (a librdkafka client property such as security.protocol: SASL_SSL)"
    if isinstance(v, bytes):
        return "is binary data to YAML (!!binary), not text; write the value itself, as text"
    if isinstance(v, datetime.date):
        return "is a date to YAML, which would change it; put the value in quotes"
    if not isinstance(v, str | int | float | bool):
        return f"is not text to YAML ({type(v).__name__}); write the value as plain text"
    return ""


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def warn_if_world_readable(path: Path, reg: Registry) -> None:
    """Warn (on stderr, never naming a secret) when a registry holding secrets is readable by others."""
    if not reg.secrets():
        return
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        print(
            f"warning: cluster registry {path} holds secrets and others can read it; run chmod 600 {path}",
            file=sys.stderr,
        )
