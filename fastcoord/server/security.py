"""SASL/PLAIN authentication and group ACLs.

Users file (JSON): ``{"users": {"alice": "alice-secret", ...}}``.
ACL file (JSON): ``{"acls": [{"principal": "User:alice", "operations": ["Read"],
"group": "orders", "pattern": "literal" | "prefixed"}, ...]}``; principal may be
``User:*``; group may be ``*`` (any group).

Operations on groups: Read (join, sync, heartbeat, leave, commit), Describe (find
coordinator, fetch offsets, describe, list) and Delete; as in Kafka, Read and Delete
imply Describe. With no ACL file every request is allowed; with one, what no ACL grants
is denied (GROUP_AUTHORIZATION_FAILED, and nothing changes). Without SASL the
principal is ``User:ANONYMOUS``.
"""
from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

__all__ = ["Acl", "Security", "load_security"]

OPERATIONS = ("Read", "Describe", "Delete")
ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True)
class Acl:
    principal: str
    operations: Tuple[str, ...]
    group: str
    prefixed: bool = False

    def matches(self, principal: str, operation: str, group: str) -> bool:
        if self.principal not in (principal, "User:*"):
            return False
        ops = self.operations
        if operation not in ops and not (operation == "Describe" and ("Read" in ops or "Delete" in ops)):
            return False
        if self.group == "*":
            return True
        return group.startswith(self.group) if self.prefixed else group == self.group


class Security:
    def __init__(self, users: Optional[Dict[str, str]] = None,
                 acls: Optional[List[Acl]] = None) -> None:
        self.users = dict(users or {})
        self.acls = None if acls is None else list(acls)

    @property
    def sasl_enabled(self) -> bool:
        return bool(self.users)

    def authenticate_plain(self, token: bytes) -> Optional[str]:
        """A SASL/PLAIN token (authzid NUL authcid NUL password) -> "User:name" or None."""
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3:
            return None
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return None
        if authzid and authzid != user:
            return None
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            return None
        return f"User:{user}"

    def authorize(self, principal: Optional[str], operation: str, group: str) -> bool:
        if self.acls is None:
            return True
        who = principal or ANONYMOUS
        return any(acl.matches(who, operation, group) for acl in self.acls)


def load_security(users_path: Optional[str], acls_path: Optional[str]) -> Optional[Security]:
    """Read the users and ACL files; None when neither is given (no SASL, allow all)."""
    if users_path is None and acls_path is None:
        return None
    users = None
    if users_path is not None:
        users = json.loads(Path(users_path).read_text())["users"]
        if not isinstance(users, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in users.items()):
            raise ValueError(f"{users_path}: 'users' must map user names to passwords")
    acls = None
    if acls_path is not None:
        acls = []
        for i, entry in enumerate(json.loads(Path(acls_path).read_text())["acls"]):
            ops = tuple(entry["operations"])
            bad = [op for op in ops if op not in OPERATIONS]
            if bad:
                raise ValueError(f"{acls_path}: acl {i}: unknown operations {bad}")
            pattern = entry.get("pattern", "literal")
            if pattern not in ("literal", "prefixed"):
                raise ValueError(f"{acls_path}: acl {i}: pattern must be literal or prefixed")
            acls.append(Acl(entry["principal"], ops, entry["group"], pattern == "prefixed"))
    return Security(users, acls)
