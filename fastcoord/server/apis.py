"""The request layer (Kafka's KafkaApis, coordinator-only): one handler per API.

A handler gets the connection's `Session` (client id, host, principal), the decoded
`Request` and `reply(body)`; it calls `reply` exactly once with a dict of response
values (see `protocol.build`), at once or later (JoinGroup/SyncGroup wait on the
coordinator's callback, Fetch waits `max_wait_ms` on a delayed operation). Everything
runs on the event loop thread: the coordinator is only ever called from there.
"""
from __future__ import annotations

import ipaddress
import logging
import string
from typing import Callable, Dict, List, Optional, Tuple

from fastcoord import Errors, OffsetAndMetadata

from .protocol import (
    API_NAMES, API_VERSIONS_KEY, Request, SASL_VERSIONS, SUPPORTED_VERSIONS, duration_ms,
)
from .error_codes import (
    ILLEGAL_SASL_STATE, INVALID_REQUEST, INVALID_TOPIC_EXCEPTION, SASL_AUTHENTICATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_SASL_MECHANISM, UNSUPPORTED_VERSION,
)
from .group_configs import GroupConfigApis
from .log_apis import LogApis
from .topic_ids import ZERO as ZERO_UUID, TopicIds

log = logging.getLogger("fastcoord.server")

NODE_ID = 0
CLUSTER_ID = "fastcoord"
COORDINATOR_TYPES = (0, 1, 2)   # FindCoordinator's key types: group, transaction, share
# ApiVersions v3's client software name and version: Kafka's pattern
# [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?, checked by characters
_SOFTWARE_ENDS = frozenset(string.ascii_letters + string.digits)
_SOFTWARE_CHARS = _SOFTWARE_ENDS | frozenset("-.")
# Kafka's "not asked for" value of authorized_operations fields.
OPERATIONS_NOT_ASKED = -2**31
# Kafka's AclOperation codes as bits, of the operations each resource type supports
TOPIC_OPERATION_BITS = {op: 1 << code for op, code in (
    ("Read", 3), ("Write", 4), ("Create", 5), ("Delete", 6), ("Alter", 7), ("Describe", 8),
    ("DescribeConfigs", 10), ("AlterConfigs", 11))}
CLUSTER_OPERATION_BITS = {op: 1 << code for op, code in (
    ("Create", 5), ("Alter", 7), ("Describe", 8), ("ClusterAction", 9),
    ("DescribeConfigs", 10), ("AlterConfigs", 11), ("IdempotentWrite", 12))}
_TOPIC_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "._-")
# Kafka's AclOperation codes of the operations a group takes here (a bit each in an
# authorized_operations field).
GROUP_OPERATION_BITS = {"Read": 1 << 3, "Delete": 1 << 6, "Describe": 1 << 8,
                        "DescribeConfigs": 1 << 10, "AlterConfigs": 1 << 11}

Reply = Callable[[dict], None]


def kafka_client_host(peer_host: str) -> str:
    """A peer's IP literal as Kafka's brokers give a member's client host: Java's
    InetAddress.toString() of an address without a host name ("/10.0.0.7"; IPv6 in
    eight groups without zero compression, "/0:0:0:0:0:0:0:1"; an IPv4-mapped IPv6
    peer of a dual-stack listener as its IPv4 address, as Java's sockets report it).
    What admin tools show as a member's HOST. Anything not an IP literal is kept."""
    literal, percent, scope = peer_host.partition("%")
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        return peer_host
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.version == 4:
        return f"/{address}"
    groups = ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":"))
    return f"/{groups}{percent}{scope}"


class Session:
    """Per-connection facts the handlers need: `peer_host` is the peer's IP literal as
    the socket gives it (the request log's host), `client_host` the same in Kafka's
    form (members' client host)."""

    __slots__ = ("client_id", "client_host", "peer_host", "principal", "sasl_mechanism",
                 "authenticated", "raw_sasl", "close_after_reply")

    def __init__(self, peer_host: str) -> None:
        self.client_id: Optional[str] = None
        self.peer_host = peer_host
        self.client_host = kafka_client_host(peer_host)
        self.principal: Optional[str] = None        # "User:name" once SASL succeeded
        self.sasl_mechanism: Optional[str] = None
        self.authenticated = False
        self.raw_sasl = False              # SaslHandshake v0: the next frame is a bare token
        self.close_after_reply = False     # failed authentication: answer, then close


class KafkaApis:
    """Dispatches decoded requests to the coordinator and builds the responses."""

    def __init__(self, coordinator, topics: Dict[str, int], *, host: str, port: int,
                 fetch_purgatory=None, security=None,
                 topic_ids: Optional[TopicIds] = None,
                 keep_group_configs: Optional[Callable[[Dict[str, Dict[str, int]]], None]]
                 = None) -> None:
        self.coord = coordinator
        self.topics = dict(topics)
        # Every declared topic has an id (made here, in memory, unless the server kept them)
        self.topic_ids = topic_ids if topic_ids is not None else TopicIds.for_topics(topics)
        self.host = host
        self.port = port
        self.fetch_purgatory = fetch_purgatory
        self.security = security            # None: no SASL, no ACLs (allow all)
        self.versions = dict(SUPPORTED_VERSIONS)
        if security is not None and security.sasl_enabled:
            self.versions.update(SASL_VERSIONS)
        # DescribeConfigs and IncrementalAlterConfigs of groups (`keep_group_configs`:
        # what writes the configs durably, None: memory only)
        configs = GroupConfigApis(coordinator, self._allowed, keep_group_configs)
        logs = LogApis(self.topics, self._topic_allowed, lambda: self.fetch_purgatory)
        self._handlers = {
            0: logs.produce, 1: logs.fetch, 2: logs.list_offsets, 3: self.metadata,
            8: self.offset_commit, 9: self.offset_fetch, 10: self.find_coordinator,
            11: self.join_group, 12: self.heartbeat, 13: self.leave_group,
            14: self.sync_group, 15: self.describe_groups, 16: self.list_groups,
            17: self.sasl_handshake, 18: self.api_versions, 36: self.sasl_authenticate,
            42: self.delete_groups, 47: self.offset_delete,
            68: self.consumer_group_heartbeat, 69: self.consumer_group_describe,
            32: configs.describe_configs, 44: configs.incremental_alter_configs,
        }
        # heartbeats_fast_path: the heartbeats (counted in `heartbeats` too) that the
        # server's wire fast path answered; consumer_heartbeats_fast_path likewise
        self.counters: Dict[str, int] = {"requests": 0, "heartbeats": 0, "joins": 0,
                                         "heartbeats_fast_path": 0, "consumer_heartbeats": 0,
                                         "consumer_heartbeats_fast_path": 0}

    # -- dispatch ------------------------------------------------------------------------
    @staticmethod
    def expects_response(request: Request) -> bool:
        """Produce with acks=0 is the one request Kafka never answers."""
        return not (request.api_key == 0 and request.body.acks == 0)

    def needs_authentication(self, session: Session, request: Request) -> bool:
        """With SASL enabled, only ApiVersions and the SASL exchange come before it."""
        return (self.security is not None and self.security.sasl_enabled
                and not session.authenticated and request.api_key not in (17, 18, 36))

    def handle(self, session: Session, request: Request, reply: Reply) -> None:
        self.counters["requests"] += 1
        self._handlers[request.api_key](session, request, reply)

    def _allowed(self, session: Session, operation: str, group_id: Optional[str]) -> bool:
        if self.security is None or group_id is None:
            return True
        return self.security.authorize(session.principal, operation, group_id)

    def _topic_allowed(self, session: Session, operation: str, topic: Optional[str]) -> bool:
        """Kafka's topic ACL check (Read to commit offsets, Describe to see metadata and
        fetch offsets); a null name is left to the handler's own validation."""
        if self.security is None or topic is None:
            return True
        return self.security.authorize(session.principal, operation, topic, "topic")

    # -- ApiVersions, Metadata, FindCoordinator ------------------------------------------
    def api_versions(self, session: Session, request: Request, reply: Reply) -> None:
        """ApiVersions as Kafka answers it (KIP-511): at a version not served, the error
        and ApiVersions' own range alone, for the client to ask again in one it knows;
        from v3, a client software name or version Kafka's pattern refuses is
        INVALID_REQUEST, with no keys."""
        if request.body is None:   # unsupported version: a v0 body (protocol.decode_request)
            lo, hi = self.versions[API_VERSIONS_KEY]
            reply({"error_code": UNSUPPORTED_VERSION, "api_keys": [
                {"api_key": API_VERSIONS_KEY, "min_version": lo, "max_version": hi}]})
            return
        if request.api_version >= 3 and not (
                _software_field(request.body.client_software_name)
                and _software_field(request.body.client_software_version)):
            reply({"error_code": INVALID_REQUEST, "api_keys": []})
            return
        reply({"error_code": 0, "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(self.versions.items())]})

    def metadata(self, session: Session, request: Request, reply: Reply) -> None:
        """Metadata as KafkaApis answers it: each topic asked for once; by id only from
        v12 (v10-11 refuse an id or a null name: INVALID_REQUEST for every topic, no
        brokers); the authorized operations when asked (v8+: the topics'; v8-10: the
        cluster's too)."""
        body = request.body
        version = request.api_version
        wanted = body.topics
        if version == 0 and not wanted:
            wanted = None       # v0 has no null list: an empty one asks for every topic
        if wanted is not None and version in (10, 11) and any(
                t.name is None or (t.topic_id is not None and t.topic_id != ZERO_UUID)
                for t in wanted):
            reply({"brokers": [], "cluster_id": None, "controller_id": -1, "topics": [
                {"error_code": INVALID_REQUEST, "name": t.name or "",
                 "topic_id": t.topic_id or ZERO_UUID, "partitions": []} for t in wanted]})
            return
        if wanted is None:
            asked = [(name, None) for name in sorted(self.topics)]
        else:
            # v12 asks for a topic by id with a null name; a topic asked twice is one
            asked = list(dict.fromkeys((t.name, getattr(t, "topic_id", None)) for t in wanted))
        topic_ops = getattr(body, "include_topic_authorized_operations", False)
        topics = [self._topic_metadata(session, name, topic_id, wanted is None, topic_ops)
                  for name, topic_id in asked]
        answer = {"brokers": [{"node_id": NODE_ID, "host": self.host, "port": self.port,
                               "rack": None}],
                  "cluster_id": CLUSTER_ID, "controller_id": NODE_ID,
                  "topics": [t for t in topics if t is not None]}
        if getattr(body, "include_cluster_authorized_operations", False):
            answer["cluster_authorized_operations"] = self._operations(
                session, CLUSTER_OPERATION_BITS, None, "cluster")
        reply(answer)

    def _operations(self, session: Session, bits: Dict[str, int], name: Optional[str],
                    resource_type: str) -> int:
        """The authorized-operations bits of a resource for this client: every one
        without ACLs; with them, those an ACL allows (the ACLs name no cluster)."""
        if self.security is None or self.security.acls is None:
            return sum(bits.values())
        if resource_type == "cluster":
            return 0
        return sum(bit for operation, bit in bits.items()
                   if self.security.authorize(session.principal, operation, name,
                                              resource_type))

    def _topic_metadata(self, session: Session, name: Optional[str], topic_id,
                        all_topics: bool, operations: bool = False) -> Optional[dict]:
        """One topic of a Metadata answer (None: left out of an all-topics answer)."""
        by_id = name is None
        if by_id:
            name = self.topic_ids.name_of(topic_id)
            if name is None or name not in self.topics:
                return {"error_code": UNKNOWN_TOPIC_ID, "name": None,
                        "topic_id": topic_id if topic_id is not None else ZERO_UUID,
                        "partitions": []}
        if not self._topic_allowed(session, "Describe", name):
            # Kafka leaves a topic the client may not describe out of the all-topics
            # answer, and answers it by name (or id) without saying whether it exists.
            if all_topics:
                return None
            return {"error_code": TOPIC_AUTHORIZATION_FAILED, "name": None if by_id else name,
                    "topic_id": topic_id if by_id else ZERO_UUID, "partitions": []}
        count = self.topics.get(name)
        if count is None:
            # (no topic is created here: Kafka with auto-creation off)
            error = UNKNOWN_TOPIC_OR_PARTITION if valid_topic_name(name) \
                else INVALID_TOPIC_EXCEPTION
            return {"error_code": error, "name": name, "topic_id": ZERO_UUID,
                    "partitions": []}
        return {"error_code": 0, "name": name, "topic_id": self.topic_ids.id_of(name),
                "is_internal": False,
                "topic_authorized_operations": self._operations(
                    session, TOPIC_OPERATION_BITS, name, "topic") if operations
                else OPERATIONS_NOT_ASKED,
                "partitions": [
                    {"error_code": 0, "partition_index": p, "leader_id": NODE_ID,
                     "leader_epoch": 0, "replica_nodes": (NODE_ID,), "isr_nodes": (NODE_ID,),
                     "offline_replicas": ()}
                    for p in range(count)]}

    def _coordinator_for(self, session: Session, key: str, key_type: int) -> dict:
        """One key's FindCoordinator answer: a group's needs Describe on it; transaction
        (and share) coordinators are not served here."""
        if key_type not in COORDINATOR_TYPES:
            # (Kafka's CoordinatorType.forId refuses a type it does not know)
            return {"key": key, "error_code": INVALID_REQUEST, "error_message": None,
                    "node_id": -1, "host": "", "port": -1}
        if key_type != 0:
            return {"key": key, "error_code": int(Errors.COORDINATOR_NOT_AVAILABLE),
                    "error_message": "fastcoord serves group coordination only",
                    "node_id": -1, "host": "", "port": -1}
        if not self._allowed(session, "Describe", key):
            # (the error's own message, as Kafka's FindCoordinatorResponse sets it)
            return {"key": key, "error_code": int(Errors.GROUP_AUTHORIZATION_FAILED),
                    "error_message": "Group authorization failed.", "node_id": -1,
                    "host": "", "port": -1}
        # (Kafka's message is Errors.NONE.message(), "NONE")
        return {"key": key, "error_code": 0, "error_message": "NONE", "node_id": NODE_ID,
                "host": self.host, "port": self.port}

    def find_coordinator(self, session: Session, request: Request, reply: Reply) -> None:
        body = request.body
        key_type = getattr(body, "key_type", 0)
        if request.api_version >= 4:
            reply({"coordinators": [self._coordinator_for(session, k, key_type)
                                    for k in body.coordinator_keys]})
            return
        reply(self._coordinator_for(session, body.key, key_type))

    # -- the group membership requests ---------------------------------------------------
    def join_group(self, session: Session, request: Request, reply: Reply) -> None:
        body = request.body
        version = request.api_version
        self.counters["joins"] += 1
        if not self._allowed(session, "Read", body.group_id):
            reply({"error_code": int(Errors.GROUP_AUTHORIZATION_FAILED), "generation_id": -1,
                   "protocol_name": None, "leader": "", "member_id": "", "members": []})
            return
        rebalance = getattr(body, "rebalance_timeout", None) if version >= 1 else None
        session_ms = duration_ms(body.session_timeout)

        def joined(result) -> None:
            reply({"error_code": int(result.error), "generation_id": result.generation_id,
                   "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
                   "leader": result.leader_id, "skip_assignment": result.skip_assignment,
                   "member_id": result.member_id,
                   "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                "metadata": m.metadata} for m in result.members]})

        self.coord.join_group(
            body.group_id, body.member_id, body.protocol_type,
            [(p.name, p.metadata) for p in body.protocols],
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=None if rebalance is None else duration_ms(rebalance),
            group_instance_id=getattr(body, "group_instance_id", None),
            require_known_member_id=version >= 4,
            client_id=session.client_id or "", client_host=session.client_host,
            callback=joined)

    def sync_group(self, session: Session, request: Request, reply: Reply) -> None:
        body = request.body
        if request.api_version >= 5 and (body.protocol_type is None or body.protocol_name is None):
            # (from v5 both are mandatory: Kafka answers before any other check)
            reply({"error_code": int(Errors.INCONSISTENT_GROUP_PROTOCOL), "assignment": b""})
            return
        if not self._allowed(session, "Read", body.group_id):
            reply({"error_code": int(Errors.GROUP_AUTHORIZATION_FAILED), "assignment": b""})
            return

        def synced(result) -> None:
            reply({"error_code": int(result.error), "protocol_type": result.protocol_type,
                   "protocol_name": result.protocol_name, "assignment": result.assignment})

        self.coord.sync_group(
            body.group_id, body.generation_id, body.member_id,
            {a.member_id: a.assignment for a in body.assignments},
            group_instance_id=getattr(body, "group_instance_id", None),
            protocol_type=getattr(body, "protocol_type", None),
            protocol_name=getattr(body, "protocol_name", None),
            callback=synced)

    def heartbeat(self, session: Session, request: Request, reply: Reply) -> None:
        body = request.body
        self.counters["heartbeats"] += 1
        if not self._allowed(session, "Read", body.group_id):
            reply({"error_code": int(Errors.GROUP_AUTHORIZATION_FAILED)})
            return
        error = self.coord.heartbeat(body.group_id, body.member_id, body.generation_id,
                                     getattr(body, "group_instance_id", None))
        reply({"error_code": int(error)})

    def leave_group(self, session: Session, request: Request, reply: Reply) -> None:
        body = request.body
        if request.api_version >= 3:
            members = [(m.member_id, m.group_instance_id) for m in body.members]
        else:
            members = [(body.member_id, None)]
        if not self._allowed(session, "Read", body.group_id):
            reply({"error_code": int(Errors.GROUP_AUTHORIZATION_FAILED), "members": []})
            return
        result = self.coord.leave_group(body.group_id, members)
        error = int(result.error)
        if request.api_version < 3 and error == 0 and result.member_errors:
            error = int(result.member_errors[0])    # v0-2 carry one member's error on top
        reply({"error_code": error, "members": [
            {"member_id": mid, "group_instance_id": iid, "error_code": int(err)}
            for (mid, iid), err in zip(members, result.member_errors)]})

    # -- the consumer group protocol (KIP-848) -------------------------------------------
    def consumer_group_heartbeat(self, session: Session, request: Request, reply: Reply) -> None:
        """ConsumerGroupHeartbeat: Kafka's checks in its order (the group's Read, then
        Describe on every subscribed topic name, then v1's client-made member id), the
        rest is the coordinator's. Topics travel as ids both ways: an owned topic id this
        broker does not know is dropped, as Kafka resolves them against its metadata
        (except in a join, which must carry no topic at all)."""
        body = request.body
        self.counters["consumer_heartbeats"] += 1
        if not self._allowed(session, "Read", body.group_id):
            reply(_heartbeat_error(int(Errors.GROUP_AUTHORIZATION_FAILED), None))
            return
        names = body.subscribed_topic_names
        if names and not all(self._topic_allowed(session, "Describe", n) for n in names):
            reply(_heartbeat_error(TOPIC_AUTHORIZATION_FAILED, None))   # (Kafka: no message)
            return
        # (Kafka's check trims: a blank member id is an empty one)
        if request.api_version >= 1 and not (body.member_id or "").strip():
            reply(_heartbeat_error(INVALID_REQUEST, "MemberId can't be empty."))
            return
        owned = None
        if body.topic_partitions is not None:
            owned = {}
            for tp in body.topic_partitions:
                name = self.topic_ids.name_of(tp.topic_id)
                if name is None:
                    # An id this broker does not know names no partition a member is
                    # assigned: reconciliation passes over it, but it is not a subset of
                    # an assignment (a previous-epoch heartbeat carrying it is fenced) and
                    # a join must carry none. It goes on under a key no topic name can
                    # be (topic names have no spaces or angle brackets).
                    owned[f"<unknown topic id {tp.topic_id}>"] = []
                    continue
                partitions = owned.setdefault(name, [])
                for p in tp.partitions:
                    if p >= 0:
                        partitions.append(p)
                    else:
                        # a negative partition is no partition a member is assigned:
                        # the same as an unknown topic, under its own key
                        owned[f"<negative partition of {name}>"] = []

        def answered(result) -> None:
            if result.error != Errors.NONE:
                reply(_heartbeat_error(int(result.error), result.error_message))
                return
            reply({"error_code": 0, "error_message": result.error_message,
                   "member_id": result.member_id, "member_epoch": result.member_epoch,
                   "heartbeat_interval": result.heartbeat_interval_ms,
                   "assignment": None if result.assignment is None else {
                       "topic_partitions": self._by_topic_id(result.assignment)}})

        # With ACLs, the group's regexes, if this heartbeat resolves them, match only
        # the topics its sender may describe (as Kafka's resolution does)
        extra = {} if self.security is None else {
            "topic_filter": lambda topic: self._topic_allowed(session, "Describe", topic)}
        self.coord.consumer_group_heartbeat(
            body.group_id, body.member_id, body.member_epoch,
            instance_id=body.instance_id, rack_id=body.rack_id,
            rebalance_timeout_ms=duration_ms(body.rebalance_timeout),
            subscribed_topic_names=None if names is None else list(names),
            subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
            server_assignor=body.server_assignor, owned_partitions=owned,
            client_id=session.client_id or "", client_host=session.client_host,
            callback=answered, **extra)

    def _by_topic_id(self, assignment: Dict[str, list], names: bool = False) -> list:
        """{topic name: partitions} as the wire's topic-id entries (with the names too
        when `names`), in name order; a topic without an id (never declared here) has
        none to give and is left out."""
        out = []
        for name in sorted(assignment):
            topic_id = self.topic_ids.id_of(name)
            if topic_id is None:
                continue
            entry = {"topic_id": topic_id, "partitions": sorted(assignment[name])}
            if names:
                entry["topic_name"] = name
            out.append(entry)
        return out

    def consumer_group_describe(self, session: Session, request: Request, reply: Reply) -> None:
        """ConsumerGroupDescribe: a group needs Describe; a described group whose members
        hold or are to hold a topic the client may not describe is answered
        TOPIC_AUTHORIZATION_FAILED without its members, as Kafka does. A group named
        more than once is answered each time, as Kafka, but described once."""
        body = request.body
        wanted = list(body.group_ids)
        permitted = [self._allowed(session, "Describe", g) for g in wanted]
        allowed = [g for g, ok in zip(wanted, permitted) if ok]
        distinct = list(dict.fromkeys(allowed))
        described = dict(zip(distinct, self.coord.consumer_group_describe(distinct))) \
            if distinct else {}
        # (as Kafka: the groups refused their Describe first, then the others)
        groups = [_described_error(gid, int(Errors.GROUP_AUTHORIZATION_FAILED), None)
                  for gid, ok in zip(wanted, permitted) if not ok]
        entries: Dict[str, dict] = {}
        for gid in allowed:
            entry = entries.get(gid)
            if entry is None:
                entry = entries[gid] = self._consumer_group_entry(
                    session, gid, described[gid], body.include_authorized_operations)
            groups.append(entry)
        reply({"groups": groups})

    def _consumer_group_entry(self, session: Session, gid: str, d, operations: bool) -> dict:
        """A ConsumerGroupDescribe answer's entry of one group, from its description."""
        if d.error != Errors.NONE:
            return _described_error(gid, int(d.error), d.error_message)
        topics = {t for m in d.members for t in (*m.assignment, *m.target_assignment)}
        if not all(self._topic_allowed(session, "Describe", t) for t in topics):
            return _described_error(
                gid, TOPIC_AUTHORIZATION_FAILED, "The group has described topic(s) that "
                "the client is not authorized to describe.")
        return {
            "error_code": 0, "group_id": gid, "group_state": str(d.state),
            "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
            "assignor_name": d.assignor_name or "",
            "authorized_operations": (self._group_operations(session, gid) if operations
                                      else OPERATIONS_NOT_ASKED),
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id,
                "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names or ()),
                # (Kafka's member holds "" for no regex, and describes it so)
                "subscribed_topic_regex": m.subscribed_topic_regex or "",
                "assignment": {"topic_partitions": self._by_topic_id(m.assignment, True)},
                "target_assignment": {
                    "topic_partitions": self._by_topic_id(m.target_assignment, True)},
                "member_type": _member_type(m)}
                for m in d.members]}

    def _group_operations(self, session: Session, group_id: str) -> int:
        """The authorized_operations bits of a group for this client."""
        return self._operations(session, GROUP_OPERATION_BITS, group_id, "group")

    # -- offsets -------------------------------------------------------------------------
    def _known_partition(self, topic: str, partition: int) -> bool:
        return 0 <= partition < self.topics.get(topic, 0)

    def offset_commit(self, session: Session, request: Request, reply: Reply) -> None:
        body = request.body
        requested: List[Tuple[str, int]] = []
        errors: Dict[Tuple[str, int], int] = {}
        offsets = {}
        for t in body.topics:
            readable = self._topic_allowed(session, "Read", t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                requested.append(tp)
                if not readable:
                    errors[tp] = TOPIC_AUTHORIZATION_FAILED
                elif not self._known_partition(*tp):
                    errors[tp] = UNKNOWN_TOPIC_OR_PARTITION
                else:
                    # v1's commit timestamp is not kept: a commit is dated when the
                    # coordinator takes it, so a client's clock cannot expire offsets
                    # early (docs/offsets-retention.md)
                    offsets[tp] = OffsetAndMetadata(
                        p.committed_offset, p.committed_metadata or "",
                        getattr(p, "committed_leader_epoch", -1))

        def respond(errors: Dict[Tuple[str, int], int]) -> None:
            by_topic: Dict[str, list] = {}
            for tp in requested:
                by_topic.setdefault(tp[0], []).append(
                    {"partition_index": tp[1], "error_code": int(errors[tp])})
            reply({"topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})

        # Kafka's order: the group (Read) first, for every partition; then each topic
        # (Read, TOPIC_AUTHORIZATION_FAILED) and whether the partition exists.
        if not self._allowed(session, "Read", body.group_id):
            respond({tp: int(Errors.GROUP_AUTHORIZATION_FAILED) for tp in requested})
            return
        if not offsets:
            respond(errors)
            return
        if request.api_version == 0:
            # Kafka 3.x keeps v0 commits in ZooKeeper, apart from the group's offsets;
            # a broker without ZooKeeper (KRaft) answers the whole request
            # UNSUPPORTED_VERSION, as fastcoord does.
            respond({tp: UNSUPPORTED_VERSION for tp in requested})
            return

        def committed(result) -> None:
            merged = dict(errors)
            merged.update({tp: int(e) for tp, e in result.items()})
            respond(merged)

        self.coord.commit_offsets(
            body.group_id, body.member_id, body.generation_id_or_member_epoch, offsets,
            group_instance_id=getattr(body, "group_instance_id", None), callback=committed,
            api_version=request.api_version)

    def _fetch_group_offsets(self, session: Session, group_id, topics, require_stable,
                             member=None) -> dict:
        """One group's OffsetFetch answer: {"error_code", "topics"}. The group needs
        Describe; each topic needs Describe too: a named one without it is answered
        TOPIC_AUTHORIZATION_FAILED, and left out of an all-topics answer."""
        if not self._allowed(session, "Describe", group_id):
            return {"group_id": group_id, "error_code": int(Errors.GROUP_AUTHORIZATION_FAILED),
                    "topics": []}
        partitions = denied = None
        if topics is not None:
            partitions, denied = [], []
            for t in topics:
                allowed = self._topic_allowed(session, "Describe", t.name)
                (partitions if allowed else denied).extend(
                    (t.name, p) for p in t.partition_indexes)
        # (v9: a consumer-protocol member's id and epoch, checked by the coordinator)
        member_id, member_epoch = (None, -1) if member is None else member
        error, found, errors = self.coord.fetch_offsets_with_errors(
            group_id, partitions, require_stable=require_stable, member_id=member_id,
            member_epoch=member_epoch)
        if int(error) != 0:
            # (Kafka answers a group's error with no partitions; v0-1 put it on each)
            return {"group_id": group_id, "error_code": int(error), "topics": []}
        by_topic: Dict[str, list] = {}
        if partitions is not None:
            order = partitions
        else:
            order = [tp for tp in sorted(found)
                     if self._topic_allowed(session, "Describe", tp[0])]
        for tp in order:
            om = found.get(tp)
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1], "error_code": int(errors.get(tp, 0)),
                "committed_offset": om.offset if om is not None else -1,
                "committed_leader_epoch": om.leader_epoch if om is not None else -1,
                "metadata": (om.metadata or "") if om is not None else ""})
        if denied:
            for name, p in denied:
                by_topic.setdefault(name, []).append(_no_offset(p, TOPIC_AUTHORIZATION_FAILED))
        return {"group_id": group_id, "error_code": int(error),
                "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    def offset_fetch(self, session: Session, request: Request, reply: Reply) -> None:
        body = request.body
        version = request.api_version
        stable = bool(getattr(body, "require_stable", False))
        if version >= 8:
            reply({"groups": [self._fetch_group_offsets(
                session, g.group_id, g.topics, stable,
                (g.member_id, g.member_epoch) if version >= 9 else None) for g in body.groups]})
            return
        if version == 0:
            # Kafka 3.x reads v0 offsets from ZooKeeper, once the group's Describe is
            # checked; without ZooKeeper (KRaft) the answer is UNSUPPORTED_VERSION.
            error = (UNSUPPORTED_VERSION if self._allowed(session, "Describe", body.group_id)
                     else int(Errors.GROUP_AUTHORIZATION_FAILED))
            answer = {"topics": []}
        else:
            answer = self._fetch_group_offsets(session, body.group_id, body.topics, stable)
            error = answer["error_code"]
        if version < 2 and error != 0:
            # v0-1 have no top-level error: each requested partition carries it (and
            # no offset), so a client can tell a denied group from one without offsets
            answer["topics"] = [
                {"name": t.name, "partitions": [_no_offset(p, error) for p in t.partition_indexes]}
                for t in body.topics]
        reply(answer)

    # -- admin ---------------------------------------------------------------------------
    def list_groups(self, session: Session, request: Request, reply: Reply) -> None:
        states = getattr(request.body, "states_filter", ())
        types = getattr(request.body, "types_filter", ())      # v5
        listings = self.coord.list_groups(list(states) if states else None,
                                          list(types) if types else None)
        # (as Kafka 3.x: while a shard loads, the groups held so far with the error; a
        # coordinator shutting down lists none)
        if not self.coord.active:
            error = int(Errors.COORDINATOR_NOT_AVAILABLE)
        elif self.coord.loading():
            error = int(Errors.COORDINATOR_LOAD_IN_PROGRESS)
        else:
            error = 0
        reply({"error_code": error, "groups": [
            {"group_id": g.group_id, "protocol_type": g.protocol_type or "",
             "group_state": str(g.state), "group_type": g.group_type}
            for g in listings if self._allowed(session, "Describe", g.group_id)]})

    def describe_groups(self, session: Session, request: Request, reply: Reply) -> None:
        """DescribeGroups (Kafka 4's): classic groups only. A group that is not one, or
        that does not exist, is answered Dead with no protocol and no members; up to v5
        with no error, from v6 (KIP-1043) with GROUP_ID_NOT_FOUND and Kafka's message.
        From v3, the client's operations on each group answered without an error when
        it asks (the field's default, -2^31, otherwise)."""
        v6 = request.api_version >= 6
        # (as Kafka: the groups refused their Describe first, then the others)
        wanted = list(request.body.groups)
        permitted = [self._allowed(session, "Describe", gid) for gid in wanted]
        groups = [{"error_code": int(Errors.GROUP_AUTHORIZATION_FAILED), "error_message": None,
                   "group_id": gid, "group_state": "", "protocol_type": "",
                   "protocol_data": "", "members": []}
                  for gid, ok in zip(wanted, permitted) if not ok]
        answered: Dict[str, dict] = {}     # a group named again: its entry again
        for gid in (gid for gid, ok in zip(wanted, permitted) if ok):
            if gid in answered:
                groups.append(answered[gid])
                continue
            kind = self.coord.group_type(gid)
            d = self.coord.describe_group(gid) if kind != "consumer" else None
            if d is None or (d.error == Errors.NONE and str(d.state) == "Dead"):
                # a consumer group (even one with classic members), or none
                answered[gid] = _dead_group(gid, v6, (
                    f"Group {gid} is not a classic group." if kind == "consumer"
                    else f"Group {gid} not found."))
            else:
                answered[gid] = {
                    "error_code": int(d.error), "error_message": None, "group_id": gid,
                    "group_state": str(d.state),
                    "protocol_type": d.protocol_type or "",
                    "protocol_data": d.protocol_name or "",
                    "members": [{"member_id": m.member_id,
                                 "group_instance_id": m.group_instance_id,
                                 "client_id": m.client_id, "client_host": m.client_host,
                                 "member_metadata": m.metadata,
                                 "member_assignment": m.assignment}
                                for m in d.members]}
            groups.append(answered[gid])
        if request.api_version >= 3 and request.body.include_authorized_operations:
            # as Kafka: every group answered without an error (a Dead one up to v5 too)
            for group in groups:
                if group["error_code"] == 0:
                    group["authorized_operations"] = self._group_operations(
                        session, group["group_id"])
        reply({"groups": groups})

    def delete_groups(self, session: Session, request: Request, reply: Reply) -> None:
        names = list(dict.fromkeys(request.body.groups_names))   # one answer a name, as Kafka
        allowed = [g for g in names if self._allowed(session, "Delete", g)]
        results = self.coord.delete_groups(allowed) if allowed else {}
        # (as Kafka: the coordinator's answers first, then the groups refused)
        reply({"results": [{"group_id": g, "error_code": int(results[g])} for g in allowed] + [
            {"group_id": g, "error_code": int(Errors.GROUP_AUTHORIZATION_FAILED)}
            for g in names if g not in results]})

    def offset_delete(self, session: Session, request: Request, reply: Reply) -> None:
        """OffsetDelete (Kafka's handleOffsetDeleteRequest): Delete on the group, then
        Read on each topic (TOPIC_AUTHORIZATION_FAILED on its partitions, before whether
        it exists); a group error answers with no topics; otherwise every partition asked
        for gets its error, a partition this broker does not have
        UNKNOWN_TOPIC_OR_PARTITION."""
        body = request.body
        if not self._allowed(session, "Delete", body.group_id):
            reply({"error_code": int(Errors.GROUP_AUTHORIZATION_FAILED), "topics": []})
            return
        requested = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
        refused: Dict[Tuple[str, int], int] = {}
        for tp in requested:
            if not self._topic_allowed(session, "Read", tp[0]):
                refused[tp] = TOPIC_AUTHORIZATION_FAILED
            elif not self._known_partition(*tp):
                refused[tp] = UNKNOWN_TOPIC_OR_PARTITION
        error, results = self.coord.delete_offsets(
            body.group_id, [tp for tp in requested if tp not in refused])
        if error != Errors.NONE:
            reply({"error_code": int(error), "topics": []})
            return
        by_topic: Dict[str, list] = {}
        for tp in dict.fromkeys(requested):
            code = refused[tp] if tp in refused else int(results[tp])
            by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": code})
        reply({"error_code": 0, "topics": [{"name": n, "partitions": ps}
                                           for n, ps in by_topic.items()]})

    # -- SASL (PLAIN) ----------------------------------------------------------------------
    def sasl_handshake(self, session: Session, request: Request, reply: Reply) -> None:
        mechanisms = ["PLAIN"]
        if request.body.mechanism not in mechanisms or self.security is None:
            reply({"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms})
            return
        session.sasl_mechanism = request.body.mechanism
        session.raw_sasl = request.api_version == 0
        reply({"error_code": 0, "mechanisms": mechanisms})

    def sasl_authenticate(self, session: Session, request: Request, reply: Reply) -> None:
        if self.security is None or session.sasl_mechanism is None or session.authenticated:
            reply({"error_code": ILLEGAL_SASL_STATE, "error_message": "unexpected SASL message",
                   "auth_bytes": b""})
            return
        principal = self.security.authenticate_plain(request.body.auth_bytes)
        if principal is None:
            log.warning("%s: SASL/PLAIN authentication failed", session.peer_host)
            session.close_after_reply = True
            reply({"error_code": SASL_AUTHENTICATION_FAILED,
                   "error_message": "Authentication failed: invalid username or password",
                   "auth_bytes": b""})
            return
        session.principal = principal
        session.authenticated = True
        reply({"error_code": 0, "error_message": None, "auth_bytes": b""})


def _heartbeat_error(error: int, message: Optional[str]) -> dict:
    """A ConsumerGroupHeartbeat answer carrying only an error, as Kafka's (no member id,
    epoch 0, no assignment)."""
    return {"error_code": error, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


def _dead_group(group_id: str, v6: bool, message: str) -> dict:
    """A DescribeGroups group that is not a classic one Kafka holds: Dead, no protocol,
    no members; GROUP_ID_NOT_FOUND with `message` from v6, no error before."""
    return {"error_code": int(Errors.GROUP_ID_NOT_FOUND) if v6 else 0,
            "error_message": message if v6 else None, "group_id": group_id,
            "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": []}


def _described_error(group_id: str, error: int, message: Optional[str]) -> dict:
    """A ConsumerGroupDescribe group answered with `error` alone."""
    return {"error_code": error, "error_message": message, "group_id": group_id,
            "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
            "members": []}


def _member_type(member) -> int:
    """ConsumerGroupDescribe v1's member type: 1 for a consumer-protocol member, 0 for a
    classic one (a group mid-migration holds both)."""
    return 0 if getattr(member, "classic", False) else 1


def _no_offset(partition: int, error: int) -> dict:
    """An OffsetFetch partition answered with `error` and no offset."""
    return {"partition_index": partition, "error_code": error, "committed_offset": -1,
            "committed_leader_epoch": -1, "metadata": ""}


def _software_field(text) -> bool:
    """Whether ApiVersions v3's client software name or version is one Kafka accepts."""
    return bool(text) and text[0] in _SOFTWARE_ENDS and text[-1] in _SOFTWARE_ENDS \
        and all(c in _SOFTWARE_CHARS for c in text)


def valid_topic_name(name: str) -> bool:
    """Kafka's Topic.validate: 1-249 of [a-zA-Z0-9._-], not "." or ".."."""
    return 0 < len(name) <= 249 and name not in (".", "..") \
        and all(c in _TOPIC_NAME_CHARS for c in name)


__all__ = ["KafkaApis", "Session", "API_NAMES"]

