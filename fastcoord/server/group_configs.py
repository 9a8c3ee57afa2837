"""DescribeConfigs (32) and IncrementalAlterConfigs (44) for GROUP resources: a consumer
group's dynamic configs (fastcoord.core.group_configs), as `kafka-configs --entity-type
groups` and AdminClients read and set them.

As Kafka 4 answers them (its ConfigHelper and its controller's config manager):
- a group's resource is authorized by DescribeConfigs / AlterConfigs on the group
  (GROUP_AUTHORIZATION_FAILED); an empty group name is INVALID_REQUEST;
- DescribeConfigs lists each group config (or the ones asked for): the group's value
  (source GROUP_CONFIG) or the coordinator's (source DEFAULT_CONFIG when it is Kafka's
  default, else STATIC_BROKER_CONFIG, under its broker name `group.consumer.*`),
  type INT, never read-only or sensitive;
- IncrementalAlterConfigs applies SET and DELETE to the group's set and checks the
  result whole (INVALID_CONFIG says why); APPEND and SUBTRACT are INVALID_CONFIG (no
  group config is a list); an unknown operation, a config named twice or a resource
  named twice is INVALID_REQUEST; `validate_only` checks without changing anything.
  The accepted sets are written (DurableStore.store_group_configs, fsync'd) before they
  take effect and before the answer.

Not as Kafka: resources of other types (topics, brokers, ...) are answered
INVALID_REQUEST per resource, as fastcoord keeps no topic or broker configs; and at most
MAX_CONFIGURED_GROUPS groups have configs (POLICY_VIOLATION past it), since the whole set
is rewritten with each change.
"""
from __future__ import annotations

import logging
from typing import Callable, Dict, Optional

from fastcoord import Errors, GroupConfigError
from fastcoord.core.group_configs import (
    GROUP_CONFIG_NAMES, HEARTBEAT_INTERVAL, KAFKA_DEFAULTS, SESSION_TIMEOUT, check_group_config,
)

from .error_codes import INVALID_CONFIG, INVALID_REQUEST, POLICY_VIOLATION

__all__ = ["GroupConfigApis", "MAX_CONFIGURED_GROUPS"]

log = logging.getLogger("fastcoord.server")

GROUP_RESOURCE = 32                 # ConfigResource.Type.GROUP
GROUP_AUTHORIZATION_FAILED = int(Errors.GROUP_AUTHORIZATION_FAILED)
UNKNOWN_SERVER_ERROR = int(Errors.UNKNOWN_SERVER_ERROR)
# Config sources and types of DescribeConfigs
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_GROUP = 8
TYPE_INT = 3
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
MAX_CONFIGURED_GROUPS = 10_000
# The coordinator's config behind each group config: its broker name and field.
_BROKER = {SESSION_TIMEOUT: ("group.consumer.session.timeout.ms",
                             "group_consumer_session_timeout_ms"),
           HEARTBEAT_INTERVAL: ("group.consumer.heartbeat.interval.ms",
                                "group_consumer_heartbeat_interval_ms")}
# Kafka's documentation of the two (GroupCoordinatorConfig's, which GroupConfig shows)
_DOCS = {SESSION_TIMEOUT: "The timeout to detect client failures when using the consumer "
                          "group protocol.",
         HEARTBEAT_INTERVAL: "The heartbeat interval given to the members of a consumer "
                             "group."}


class GroupConfigApis:
    """The two handlers, over a coordinator and the store of the configs (a callable
    that keeps `{group id: {name: value}}` durably, or None: memory only)."""

    def __init__(self, coordinator, allowed: Callable[[object, str, str], bool],
                 keep: Optional[Callable[[Dict[str, Dict[str, int]]], None]] = None) -> None:
        self.coord = coordinator
        self._allowed = allowed         # (session, operation, group id) -> bool
        self._keep = keep

    # -- DescribeConfigs ------------------------------------------------------------------
    def describe_configs(self, session, request, reply) -> None:
        body = request.body
        synonyms = bool(getattr(body, "include_synonyms", False))
        docs = bool(getattr(body, "include_documentation", False))
        results = []
        for resource in body.resources:
            out = {"resource_type": resource.resource_type,
                   "resource_name": resource.resource_name, "configs": [],
                   "error_code": 0, "error_message": None}
            name = resource.resource_name
            if resource.resource_type != GROUP_RESOURCE:
                out.update(error_code=INVALID_REQUEST,
                           error_message="fastcoord keeps the configs of groups only")
            elif not self._allowed(session, "DescribeConfigs", name):
                out.update(error_code=GROUP_AUTHORIZATION_FAILED,
                           error_message="Group authorization failed.")
            elif not name:
                out.update(error_code=INVALID_REQUEST,
                           error_message="Group name must not be empty")
            else:
                keys = resource.configuration_keys
                wanted = GROUP_CONFIG_NAMES if keys is None or len(keys) == 0 else \
                    [k for k in GROUP_CONFIG_NAMES if k in set(keys)]
                own = self.coord.group_config(name)
                out["configs"] = [self._entry(k, own, synonyms, docs) for k in wanted]
            results.append(out)
        reply({"results": results})

    def _entry(self, name: str, own: Dict[str, int], synonyms: bool, docs: bool) -> dict:
        broker_name, field = _BROKER[name]
        broker_value = getattr(self.coord.config, field)
        # (Kafka's chain: the group's value, the broker's from its properties, the broker
        # config's default)
        chain = [{"name": broker_name, "value": str(KAFKA_DEFAULTS[name]),
                  "source": SOURCE_DEFAULT}]
        if broker_value != KAFKA_DEFAULTS[name]:
            chain.insert(0, {"name": broker_name, "value": str(broker_value),
                             "source": SOURCE_STATIC_BROKER})
        if name in own:
            chain.insert(0, {"name": name, "value": str(own[name]), "source": SOURCE_GROUP})
        return {"name": name, "value": chain[0]["value"], "read_only": False,
                "config_source": chain[0]["source"], "is_sensitive": False,
                "synonyms": chain if synonyms else [], "config_type": TYPE_INT,
                "documentation": _DOCS[name] if docs else None}

    # -- IncrementalAlterConfigs ----------------------------------------------------------
    def incremental_alter_configs(self, session, request, reply) -> None:
        body = request.body
        validate_only = bool(body.validate_only)
        named: Dict[tuple, int] = {}
        for resource in body.resources:
            key = (resource.resource_type, resource.resource_name)
            named[key] = named.get(key, 0) + 1
        answers = []
        accepted: Dict[str, Dict[str, int]] = {}    # group id -> its new whole set
        for resource in body.resources:
            name = resource.resource_name
            error, message, new = self._altered(session, resource, named, accepted)
            if error == 0 and new is not None:
                accepted[name] = new
            answers.append({"error_code": error, "error_message": message,
                            "resource_type": resource.resource_type, "resource_name": name})
        if accepted and not validate_only:
            every = self.coord.group_configs()
            every.update(accepted)
            every = {g: v for g, v in every.items() if v}
            failed = None
            if len(every) > MAX_CONFIGURED_GROUPS:
                failed = (POLICY_VIOLATION, f"at most {MAX_CONFIGURED_GROUPS} groups may "
                                            "have configs")
            elif self._keep is not None:
                try:
                    self._keep(every)
                except OSError as exc:
                    log.error("group configs could not be written: %s", exc)
                    failed = (UNKNOWN_SERVER_ERROR, f"the group configs could not be "
                                                    f"written: {exc.strerror or exc}")
            if failed is not None:
                for answer in answers:
                    if answer["resource_name"] in accepted and answer["error_code"] == 0:
                        answer["error_code"], answer["error_message"] = failed
            else:
                for group_id, values in accepted.items():
                    self.coord.set_group_config(group_id, values)
        reply({"responses": answers})

    def _altered(self, session, resource, named, accepted):
        """(error code, message, the group's new set or None) for one resource."""
        name = resource.resource_name
        if resource.resource_type != GROUP_RESOURCE:
            return INVALID_REQUEST, "fastcoord keeps the configs of groups only", None
        if named[(resource.resource_type, name)] > 1:
            return INVALID_REQUEST, "Each resource must appear at most once.", None
        if not self._allowed(session, "AlterConfigs", name):
            return GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", None
        if not name:
            return INVALID_REQUEST, "Default group resources are not allowed.", None
        seen = set()
        ops = []
        for config in resource.configs:
            if config.name in seen:
                return INVALID_REQUEST, "Error due to duplicate config keys", None
            if config.value is None and config.config_operation != OP_DELETE:
                return INVALID_REQUEST, f"Null value not supported for : {config.name}", None
            seen.add(config.name)
            ops.append((config.name, config.config_operation, config.value))
        current: Dict[str, object] = dict(self.coord.group_config(name))
        for config_name, op, value in ops:
            if op == OP_SET:
                current[config_name] = value
            elif op == OP_DELETE:
                current.pop(config_name, None)
            elif op in (OP_APPEND, OP_SUBTRACT):
                verb = "APPEND" if op == OP_APPEND else "SUBTRACT"
                return (INVALID_CONFIG, f"Can't {verb} to key {config_name} because its type "
                                        "is not LIST.", None)
            else:
                return INVALID_REQUEST, f"unknown config operation {op}", None
        try:
            checked = check_group_config(self.coord.config, current)
        except GroupConfigError as exc:
            return INVALID_CONFIG, str(exc), None
        return 0, None, checked
