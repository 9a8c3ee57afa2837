"""SASL/PLAIN and group ACLs: raw protocol and real clients."""
from __future__ import annotations

import json

import pytest

from fastcoord.server.security import Acl, Security
from test_server_harness import ClientProc, RawConn, ServerProc, wait_until

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
ACLS = [{"principal": "User:alice", "operations": ["Read"], "group": "team-a", "pattern": "prefixed"},
        {"principal": "User:bob", "operations": ["Describe"], "group": "team-a-1"}]
PARTITIONS = [("orders", p) for p in range(4)]


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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("sec")
    (d / "users.json").write_text(json.dumps({"users": USERS}))
    (d / "acls.json").write_text(json.dumps({"acls": ACLS}))
    proc = ServerProc(d / "server.log", "--sasl-users", str(d / "users.json"),
                      "--acls", str(d / "acls.json"), topics=["orders:4"])
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
