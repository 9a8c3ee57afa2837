"""SASL/PLAIN authentication and ACLs on groups and topics (Kafka's authorizer rules).

Users file (JSON): ``{"users": {"alice": "alice-secret", ...}}``.
ACL file (JSON): ``{"acls": [entry, ...]}``, each entry
``{"principal": "User:alice" | "User:*", "operations": [...], "group": NAME | "topic": NAME,
"pattern": "literal" | "prefixed", "permission": "allow" | "deny"}`` (docs/security.md).

Operations: on groups Read (join, sync, heartbeat, leave, commit), Describe (find
coordinator, fetch offsets, describe, list), Delete, DescribeConfigs and AlterConfigs
(the group's configs); on topics Read (commit offsets) and Describe (metadata, fetch
offsets); All stands for every operation. As in Kafka: an allowed Read or Delete implies
Describe, an allowed AlterConfigs implies DescribeConfigs, a deny entry wins over any
allow, a literal name
``*`` matches every name, a prefixed one every name starting with it. With no ACL file
every request is allowed; with one, what no ACL allows is denied. Without SASL the
principal is ``User:ANONYMOUS``.
"""
from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

__all__ = ["Acl", "Security", "load_security", "OPERATIONS"]

# The operations each resource type takes in an ACL entry ("All": any of them).
OPERATIONS: Dict[str, Tuple[str, ...]] = {
    "group": ("Read", "Describe", "Delete", "DescribeConfigs", "AlterConfigs", "All"),
    "topic": ("Read", "Describe", "All"),
}
# An allowed one of these implies an allowed Describe (never a denied one: Kafka's rule).
_IMPLY_DESCRIBE = ("Read", "Delete")
ANONYMOUS = "User:ANONYMOUS"
_FIELDS = ("principal", "operations", "group", "topic", "pattern", "permission")


@dataclass(frozen=True)
class Acl:
    """One ACL entry: `group` or `topic` names the resource (exactly one is set)."""
    principal: str
    operations: Tuple[str, ...]
    group: Optional[str] = None
    prefixed: bool = False
    topic: Optional[str] = None
    deny: bool = False

    def _names(self, resource_type: str, name: str) -> bool:
        pattern = self.group if resource_type == "group" else self.topic
        if pattern is None:
            return False
        if self.prefixed:
            return name.startswith(pattern)
        return pattern == "*" or name == pattern

    def _grants(self, operation: str) -> bool:
        ops = self.operations
        if operation in ops or "All" in ops:
            return True
        if self.deny:
            return False
        return ((operation == "Describe" and any(op in ops for op in _IMPLY_DESCRIBE))
                or (operation == "DescribeConfigs" and "AlterConfigs" in ops))

    def matches(self, principal: str, operation: str, name: str,
                resource_type: str = "group") -> bool:
        """Whether this entry speaks (allows, or denies if `deny`) for the request."""
        return (self.principal in (principal, "User:*") and self._names(resource_type, name)
                and self._grants(operation))


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

    def authorize(self, principal: Optional[str], operation: str, name: str,
                  resource_type: str = "group") -> bool:
        """Whether `principal` may do `operation` on the group (or topic) `name`: some
        allow entry matches and no deny entry does."""
        if self.acls is None:
            return True
        who = principal or ANONYMOUS
        allowed = False
        for acl in self.acls:
            if acl.matches(who, operation, name, resource_type):
                if acl.deny:
                    return False
                allowed = True
        return allowed


class AclFileError(ValueError):
    """An ACL file entry that is not valid; the message names the entry and the field."""


def _parse_acl(where: str, entry) -> Acl:
    if not isinstance(entry, dict):
        raise AclFileError(f"{where}: an entry must be a JSON object")
    unknown = [k for k in entry if k not in _FIELDS]
    if unknown:
        raise AclFileError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(_FIELDS)})")
    principal = entry.get("principal")
    if not (isinstance(principal, str) and principal.startswith("User:") and len(principal) > 5):
        raise AclFileError(f"{where}: field 'principal' must be \"User:NAME\" or \"User:*\"")
    kinds = [k for k in ("group", "topic") if k in entry]
    if len(kinds) != 1:
        raise AclFileError(f"{where}: needs exactly one of the fields 'group' and 'topic'")
    kind = kinds[0]
    name = entry[kind]
    if not isinstance(name, str) or not name:
        raise AclFileError(f"{where}: field {kind!r} must be a non-empty string")
    ops = entry.get("operations")
    if not isinstance(ops, list) or not ops or not all(isinstance(op, str) for op in ops):
        raise AclFileError(f"{where}: field 'operations' must be a non-empty list of names")
    bad = [op for op in ops if op not in OPERATIONS[kind]]
    if bad:
        raise AclFileError(f"{where}: field 'operations': {bad[0]!r} is not an operation on a "
                           f"{kind} (one of {', '.join(OPERATIONS[kind])})")
    pattern = entry.get("pattern", "literal")
    if pattern not in ("literal", "prefixed"):
        raise AclFileError(f"{where}: field 'pattern' must be \"literal\" or \"prefixed\"")
    permission = entry.get("permission", "allow")
    if permission not in ("allow", "deny"):
        raise AclFileError(f"{where}: field 'permission' must be \"allow\" or \"deny\"")
    return Acl(principal, tuple(ops), prefixed=pattern == "prefixed",
               deny=permission == "deny", **{kind: name})


def parse_acls(source: str, data) -> List[Acl]:
    """The entries of a parsed ACL file; `source` names the file in errors."""
    if not isinstance(data, dict) or not isinstance(data.get("acls"), list):
        raise AclFileError(f"{source}: must hold a JSON object with an 'acls' list")
    return [_parse_acl(f"{source}: acls[{i}]", entry) for i, entry in enumerate(data["acls"])]


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
        acls = parse_acls(acls_path, json.loads(Path(acls_path).read_text()))
    return Security(users, acls)
