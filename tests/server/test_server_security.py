"""SASL/PLAIN and group and topic ACLs: raw protocol and real clients."""
from __future__ import annotations

import json

import pytest

from fastcoord.server.security import Acl, AclFileError, Security, parse_acls
from helpers.server import ClientProc, RawConn, ServerProc, wait_until

USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
ACLS = [{"principal": "User:alice", "operations": ["Read"], "group": "team-a", "pattern": "prefixed"},
        {"principal": "User:alice", "operations": ["Read"], "topic": "orders"},
        {"principal": "User:bob", "operations": ["Describe"], "group": "team-a-1"},
        {"principal": "User:bob", "operations": ["Describe"], "topic": "orders"},
        {"principal": "User:carol", "operations": ["All"], "group": "*"},
        {"principal": "User:carol", "operations": ["All"], "topic": "*"},
        {"principal": "User:carol", "operations": ["Describe"], "topic": "hidden",
         "permission": "deny"}]
PARTITIONS = [("orders", p) for p in range(4)]
TOPICS = ["orders:4", "secret:2", "hidden:1"]


def _plain(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def test_plain_tokens_and_acl_matching():
    sec = Security(USERS, [Acl("User:alice", ("Read",), "team-a", prefixed=True),
                           Acl("User:*", ("Delete",), "scratch")])
    assert sec.authenticate_plain(_plain("alice", "alice-secret")) == "User:alice"
    assert sec.authenticate_plain(b"alice\x00alice\x00alice-secret") == "User:alice"
    assert sec.authenticate_plain(_plain("alice", "wrong")) is None
    assert sec.authenticate_plain(b"bob\x00alice\x00alice-secret") is None   # authzid != user
    assert sec.authenticate_plain(b"\xff\x00\xfe\x00x") is None
    assert sec.authenticate_plain(b"no separators") is None
    assert sec.authorize("User:alice", "Read", "team-a-7")
    assert sec.authorize("User:alice", "Describe", "team-a")      # Read implies Describe
    assert not sec.authorize("User:alice", "Delete", "team-a")
    assert not sec.authorize("User:alice", "Read", "team-b")
    assert sec.authorize("User:bob", "Delete", "scratch")          # User:* wildcard
    assert not sec.authorize(None, "Read", "team-a")               # ANONYMOUS
    assert Security(USERS, None).authorize(None, "Read", "any")    # no ACLs: allow all


def test_acl_rules_deny_wins_all_wildcards_and_resource_types():
    sec = Security(USERS, [
        Acl("User:alice", ("All",), topic="*"),
        Acl("User:alice", ("Read",), topic="pay", prefixed=True, deny=True),
        Acl("User:bob", ("Read",), topic="orders"),
        Acl("User:*", ("Describe",), topic="public"),
        Acl("User:bob", ("Describe",), group="orders")])
    assert sec.authorize("User:alice", "Read", "anything", "topic")        # All on "*"
    assert not sec.authorize("User:alice", "Read", "payments", "topic")    # deny wins
    assert sec.authorize("User:alice", "Describe", "payments", "topic")    # deny Read only
    assert sec.authorize("User:bob", "Describe", "orders", "topic")        # Read implies it
    assert not sec.authorize("User:bob", "Read", "orders2", "topic")       # literal name
    assert sec.authorize("User:carol", "Describe", "public", "topic")      # User:*
    assert not sec.authorize("User:carol", "Read", "public", "topic")
    # a topic entry grants nothing on a group of the same name, nor the reverse
    assert not sec.authorize("User:alice", "Read", "anything")
    assert not sec.authorize("User:bob", "Describe", "orders2")
    assert sec.authorize("User:bob", "Describe", "orders")
    assert not sec.authorize("User:bob", "Read", "orders")
    # a deny of Read does not imply a deny of Describe; a deny of All denies everything
    deny_all = Security(USERS, [Acl("User:*", ("All",), group="*"),
                                Acl("User:bob", ("All",), group="g", deny=True)])
    assert not deny_all.authorize("User:bob", "Describe", "g")
    assert deny_all.authorize("User:alice", "Delete", "g")


def test_acl_file_entries_are_validated_naming_entry_and_field():
    acls = parse_acls("f.json", {"acls": [
        {"principal": "User:a", "operations": ["Read"], "topic": "t"},        # topic alone
        {"principal": "User:*", "operations": ["Delete"], "group": "g", "pattern": "prefixed"},
        {"principal": "User:a", "operations": ["All"], "topic": "*", "permission": "deny"}]})
    assert acls == [Acl("User:a", ("Read",), topic="t"),
                    Acl("User:*", ("Delete",), group="g", prefixed=True),
                    Acl("User:a", ("All",), topic="*", deny=True)]
    cases = [
        ({"principal": "User:a", "operations": ["Read"], "group": "g", "topic": "t"},
         "f.json: acls[1]: needs exactly one of the fields 'group' and 'topic'"),
        ({"principal": "User:a", "operations": ["Read"]},
         "f.json: acls[1]: needs exactly one of the fields 'group' and 'topic'"),
        ({"principal": "User:a", "operations": ["Delete"], "topic": "t"},
         "f.json: acls[1]: field 'operations': 'Delete' is not an operation on a topic"),
        ({"principal": "alice", "operations": ["Read"], "group": "g"},
         "f.json: acls[1]: field 'principal'"),
        ({"principal": "User:a", "operations": ["Read"], "group": "g", "host": "*"},
         "f.json: acls[1]: unknown field 'host'"),
        ({"principal": "User:a", "operations": "Read", "group": "g"},
         "f.json: acls[1]: field 'operations'"),
        ({"principal": "User:a", "operations": ["Read"], "group": "g", "permission": "no"},
         "f.json: acls[1]: field 'permission'"),
        ({"principal": "User:a", "operations": ["Read"], "group": "g", "pattern": "glob"},
         "f.json: acls[1]: field 'pattern'"),
        ({"principal": "User:a", "operations": ["Read"], "topic": ""},
         "f.json: acls[1]: field 'topic'"),
    ]
    good = {"principal": "User:a", "operations": ["Read"], "group": "g"}
    for entry, message in cases:
        with pytest.raises(AclFileError) as exc:
            parse_acls("f.json", {"acls": [good, entry]})
        assert str(exc.value).startswith(message), (entry, str(exc.value))
    with pytest.raises(AclFileError, match="an 'acls' list"):
        parse_acls("f.json", {"acl": []})


def test_serve_refuses_a_bad_acl_file_naming_entry_and_field(tmp_path):
    import subprocess
    import sys
    bad = tmp_path / "acls.json"
    bad.write_text(json.dumps({"acls": [
        {"principal": "User:a", "operations": ["Read"], "topic": "t", "group": "g"}]}))
    out = subprocess.run([sys.executable, "-m", "fastcoord", "serve", "--port", "0",
                          "--acls", str(bad)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "acls[0]: needs exactly one of the fields 'group' and 'topic'" in out.stderr


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("sec")
    (d / "users.json").write_text(json.dumps({"users": USERS}))
    (d / "acls.json").write_text(json.dumps({"acls": ACLS}))
    proc = ServerProc(d / "server.log", "--sasl-users", str(d / "users.json"),
                      "--acls", str(d / "acls.json"), topics=TOPICS)
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log(), proc.log()[-3000:]


HEARTBEAT = {"group_id": "team-a-1", "generation_id": 0, "member_id": "nobody"}


def _login(conn: RawConn, user: str, password: str) -> int:
    assert conn.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
    return conn.call(36, 2, {"auth_bytes": _plain(user, password)}).error_code


def test_requests_before_authentication_close_the_connection(server):
    conn = RawConn(server.port)
    assert conn.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}) \
        .error_code == 0                                   # ApiVersions is allowed first
    conn.send(12, 4, HEARTBEAT)
    assert conn.closed_by_server()


def test_wrong_password_is_answered_58_then_closed(server):
    conn = RawConn(server.port)
    assert _login(conn, "alice", "guess") == 58
    assert conn.closed_by_server()


def test_unsupported_mechanism(server):
    conn = RawConn(server.port)
    response = conn.call(17, 1, {"mechanism": "SCRAM-SHA-256"})
    assert response.error_code == 33 and list(response.mechanisms) == ["PLAIN"]


def test_authorized_and_denied_groups(server):
    alice, bob = RawConn(server.port), RawConn(server.port)
    assert _login(alice, "alice", "alice-secret") == 0
    assert _login(bob, "bob", "bob-secret") == 0
    assert alice.call(12, 4, HEARTBEAT).error_code == 25             # allowed: unknown member
    assert alice.call(12, 4, HEARTBEAT | {"group_id": "team-b"}).error_code == 30
    assert bob.call(12, 4, HEARTBEAT).error_code == 30               # Describe is not Read
    # a denied commit changes nothing
    commit = {"group_id": "team-a-1", "generation_id_or_member_epoch": -1, "member_id": "",
              "topics": [{"name": "orders", "partitions": [
                  {"partition_index": 0, "committed_offset": 9, "committed_metadata": ""}]}]}
    assert bob.call(8, 7, commit).topics[0].partitions[0].error_code == 30
    fetch = {"group_id": "team-a-1", "topics": [{"name": "orders", "partition_indexes": [0]}]}
    assert bob.call(9, 7, fetch).topics[0].partitions[0].committed_offset == -1
    assert alice.call(8, 7, commit).topics[0].partitions[0].error_code == 0
    assert bob.call(9, 7, fetch).topics[0].partitions[0].committed_offset == 9   # Describe ok
    assert bob.call(42, 2, {"groups_names": ["team-a-1"]}).results[0].error_code == 30


def test_sasl_handshake_v0_then_a_bare_token(server):
    conn = RawConn(server.port)
    assert conn.call(17, 0, {"mechanism": "PLAIN"}).error_code == 0
    token = _plain("alice", "alice-secret")
    conn.send_raw(len(token).to_bytes(4, "big") + token)
    assert conn.recv_frame() == b""
    assert conn.call(12, 4, HEARTBEAT).error_code == 25


@pytest.mark.clients
@pytest.mark.parametrize("lib", ["kafka-python", "confluent"])
def test_clients_authorized_consume_and_unauthorized_get_error_30(server, tmp_path, lib):
    good = ClientProc(lib, server.bootstrap, f"team-a-{lib}", "orders", f"{lib}-alice",
                      tmp_path, user="alice", password="alice-secret")
    bad = ClientProc(lib, server.bootstrap, f"team-b-{lib}", "orders", f"{lib}-bob",
                     tmp_path, user="bob", password="bob-secret")
    try:
        assert wait_until(lambda: good.assignment == frozenset(PARTITIONS), 30), good.log()
        assert wait_until(lambda: any("AUTHORIZATION" in e.upper() for e in bad.poll_errors),
                          30), (bad.poll_errors, bad.log())
        assert not bad.assignment
    finally:
        for c in (good, bad):
            c.close(timeout=5)
            c.cleanup()


_METADATA = {"allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
             "include_topic_authorized_operations": False}


def _names(metadata) -> dict:
    return {t.name: int(t.error_code) for t in metadata.topics}


def test_metadata_lists_only_describable_topics(server):
    alice, carol = RawConn(server.port), RawConn(server.port)
    assert _login(alice, "alice", "alice-secret") == 0
    assert _login(carol, "carol", "carol-secret") == 0
    assert _names(alice.call(3, 9, _METADATA | {"topics": None})) == {"orders": 0}
    assert _names(carol.call(3, 9, _METADATA | {"topics": None})) == {"orders": 0, "secret": 0}
    named = _METADATA | {"topics": [{"name": n} for n in ("orders", "secret", "nope", "hidden")]}
    # by name: undescribable ones are 29 whether they exist or not
    assert _names(alice.call(3, 9, named)) == {"orders": 0, "secret": 29, "nope": 29,
                                               "hidden": 29}
    assert _names(carol.call(3, 1, named)) == {"orders": 0, "secret": 0, "nope": 3,
                                               "hidden": 29}


def _commit_body(group, tps, offset=5):
    topics = {}
    for t, p in tps:
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": offset,
                                         "committed_metadata": "m"})
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def _partition_errors(response) -> dict:
    return {(t.name, p.partition_index): int(p.error_code)
            for t in response.topics for p in t.partitions}


def _fetched(response) -> dict:
    return {(t.name, p.partition_index): (int(p.error_code), p.committed_offset)
            for t in response.topics for p in t.partitions}


def test_offset_commit_and_fetch_need_topic_acls(server):
    alice, bob, carol = RawConn(server.port), RawConn(server.port), RawConn(server.port)
    for conn, user in ((alice, "alice"), (bob, "bob"), (carol, "carol")):
        assert _login(conn, user, f"{user}-secret") == 0
    tps = [("orders", 1), ("secret", 0), ("orders", 99), ("nope", 0)]
    for version in (2, 7):
        got = _partition_errors(alice.call(8, version, _commit_body("team-a-topics", tps)))
        # Read on the topic, else 29; then the partition must exist, else 3
        assert got == {("orders", 1): 0, ("secret", 0): 29, ("orders", 99): 3, ("nope", 0): 29}
    # the group is checked first: 30 on every partition, whatever the topics
    got = _partition_errors(alice.call(8, 7, _commit_body("team-b", tps)))
    assert set(got.values()) == {30}
    assert _partition_errors(carol.call(8, 7, _commit_body("team-a-topics", [("secret", 1)]))) \
        == {("secret", 1): 0}
    fetch = {"group_id": "team-a-topics", "topics": [
        {"name": "orders", "partition_indexes": [1]}, {"name": "secret", "partition_indexes": [1]}]}
    assert _fetched(alice.call(9, 7, fetch)) == {("orders", 1): (0, 5), ("secret", 1): (29, -1)}
    assert _fetched(carol.call(9, 7, fetch)) == {("orders", 1): (0, 5), ("secret", 1): (0, 5)}
    # all topics: the ones the client may not describe are left out
    assert _fetched(alice.call(9, 7, {"group_id": "team-a-topics", "topics": None})) \
        == {("orders", 1): (0, 5)}


def test_offset_fetch_v1_of_a_denied_group_is_30_on_each_partition(server):
    bob = RawConn(server.port)
    assert _login(bob, "bob", "bob-secret") == 0
    fetch = {"group_id": "team-b", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]}
    for version in (0, 1):
        assert _fetched(bob.call(9, version, fetch)) == {("orders", 0): (30, -1),
                                                         ("orders", 1): (30, -1)}
    response = bob.call(9, 2, fetch)          # v2+: the group's error is at the top
    assert int(response.error_code) == 30 and not response.topics


def test_an_acl_file_without_topic_entries_is_warned_about(tmp_path):
    (tmp_path / "acls.json").write_text(json.dumps({"acls": ACLS[:1]}))
    proc = ServerProc(tmp_path / "server.log", "--acls", str(tmp_path / "acls.json"))
    try:
        assert "has no topic ACL: every topic is denied" in proc.log()
    finally:
        assert proc.stop() == 0
