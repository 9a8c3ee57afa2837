"""Dynamic group configs (Kafka 4's `kafka-configs --entity-type groups`): a consumer
group's own session timeout and heartbeat interval, set at run time over the
coordinator's `group_consumer_*` defaults.

In the consumer protocol (KIP-848) the client no longer chooses its session timeout:
the group's config is the one way to give one group a longer (or shorter) session or a
different heartbeat interval than the rest. A value takes effect at each member's next
heartbeat (its session is refreshed with the group's value then; every answer carries
the group's interval), as in Kafka.

Checks are Kafka's (GroupConfig.validate): a name must be a group config; a value an
int of at least 1, the session timeout within the coordinator's min/max session
timeouts, the interval within its min/max intervals, and the session timeout greater
than the interval, where a config not set counts with Kafka's default (45 s, 5 s), not
the coordinator's.

Share-group configs (`share.*`) are group configs in Kafka 4; fastcoord serves no share
groups, so they are refused here as unknown (a documented difference).
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Union

__all__ = ["SESSION_TIMEOUT", "HEARTBEAT_INTERVAL", "GROUP_CONFIG_NAMES", "KAFKA_DEFAULTS",
           "GroupConfigError", "check_group_config", "parse_group_config_value"]

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
GROUP_CONFIG_NAMES = (SESSION_TIMEOUT, HEARTBEAT_INTERVAL)
# Kafka's defaults of the two configs (its ConfigDef's, those of the broker configs
# behind them too): what its checks assume for a config the group does not set,
# whatever the coordinator's own defaults are.
KAFKA_DEFAULTS = {SESSION_TIMEOUT: 45_000, HEARTBEAT_INTERVAL: 5_000}
_INT_MAX = 2**31 - 1


class GroupConfigError(ValueError):
    """A group config Kafka would refuse (its INVALID_CONFIG): the message says why."""


def parse_group_config_value(name: str, value: Union[str, int]) -> int:
    """A config's value as Kafka reads an INT config (a str is trimmed and parsed as Java's
    Integer.parseInt does: one optional sign, then digits; an int taken as it is):
    GroupConfigError, with Kafka's message, for an unknown name, a value that is not an
    int32 or is below 1."""
    if name not in GROUP_CONFIG_NAMES:
        raise GroupConfigError(f"Unknown group config name: {name}")
    number: Optional[int] = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text[:1] in ("+", "-") else text
        if digits.isascii() and digits.isdigit():
            number = int(text)
    if number is None or not -2**31 <= number <= _INT_MAX:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: "
                               "Not a number of type INT")
    if number < 1:
        raise GroupConfigError(f"Invalid value {value} for configuration {name}: "
                               "Value must be at least 1")
    return number


def check_group_config(config, values: Mapping[str, Union[str, int]]) -> Dict[str, int]:
    """`values` ({name: value}, the group's whole set of configs) parsed and checked
    against the coordinator's CoordinatorConfig `config`: {name: int}, or
    GroupConfigError naming the first problem."""
    if not isinstance(values, Mapping):
        raise TypeError(f"configs must be a mapping of str to int, got {type(values).__name__}")
    parsed: Dict[str, int] = {}
    for name, value in values.items():
        if type(name) is not str:
            raise TypeError(f"a group config name must be a str, got {type(name).__name__}")
        parsed[name] = parse_group_config_value(name, value)
    merged = dict(KAFKA_DEFAULTS, **parsed)
    session, interval = merged[SESSION_TIMEOUT], merged[HEARTBEAT_INTERVAL]
    _within(HEARTBEAT_INTERVAL, interval, config.group_consumer_min_heartbeat_interval_ms,
            config.group_consumer_max_heartbeat_interval_ms, "heartbeat.interval")
    _within(SESSION_TIMEOUT, session, config.group_consumer_min_session_timeout_ms,
            config.group_consumer_max_session_timeout_ms, "session.timeout")
    if session <= interval:
        raise GroupConfigError(f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")
    return parsed


def _within(name: str, value: int, lo: int, hi: int, what: str) -> None:
    """`value` within the coordinator's bounds; Kafka's message names the broker config
    it breaks (group.consumer.min.WHAT.ms, group.consumer.max.WHAT.ms)."""
    if value < lo:
        raise GroupConfigError(f"{name} must be greater than or equal to "
                               f"group.consumer.min.{what}.ms")
    if value > hi:
        raise GroupConfigError(f"{name} must be less than or equal to "
                               f"group.consumer.max.{what}.ms")

