"""`fastcoord serve`: the coordinator behind the Kafka wire protocol.

A coordinator-only broker: the single broker (node 0) of a cluster whose topics are
declared by configuration; it keeps no record data. Codecs are kio's (Kafka's own
message schemas); see `protocol`, `apis` (the request layer) and `server` (asyncio).
Needs the `server` extra: `pip install 'fastcoord[server]'`.
"""
from __future__ import annotations

from .server import CoordinatorServer, ServerConfig, serve

__all__ = ["CoordinatorServer", "ServerConfig", "serve"]
