"""Committed cursors of consumer groups: the operator's commands and their replication.

operations   `stream cursor list/delete` and `stream assign list`
replicator   CursorReplicator: a group's cursors carried to a replica of the stream
"""

from .replicator import CursorReplicator

__all__ = ["CursorReplicator"]
