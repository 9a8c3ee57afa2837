"""Group configs on the wire, case by case against Apache Kafka 4.0: what its broker
(ConfigHelper for DescribeConfigs, ConfigAdminManager.preprocess for IncrementalAlterConfigs)
and its controller (ConfigurationControlManager, ControllerConfigurationValidator,
GroupConfig.validate) answer for GROUP resources: codes, messages, the synonym chain,
documentation, and what a refused or validate-only change leaves behind.

Each test asserts Kafka's behaviour; the comment above it names the Kafka method that
decides it. Frames go through the real handlers in process (the helpers of
test_group_configs_wire), over both coordinator twins."""
from __future__ import annotations

import pytest

from fastcoord import CoordinatorConfig, GroupCoordinator, ManualClock
from fastcoord.server.apis import KafkaApis
from tests.server.test_group_configs_wire import (
    APPEND, DELETE, INTERVAL, SESSION, SET, _call, alter, describe, values,
)

INVALID_CONFIG, INVALID_REQUEST = 40, 42
SOURCE_STATIC_BROKER, SOURCE_DEFAULT, SOURCE_GROUP = 4, 5, 8
TYPE_INT = 3
SUBTRACT = 3


def _apis(impl, **config):
    coord = GroupCoordinator(CoordinatorConfig(**config), clock=ManualClock(0), impl=impl)
    return KafkaApis(coord, {"orders": 4}, host="127.0.0.1", port=9092)


def _refused(impl, ops, group="g", **config):
    """(error code, message) of one IncrementalAlterConfigs resource, checking that the
    group's configs (one interval set beforehand) are left as they were."""
    apis = _apis(impl, **config)
    alter(apis, ("g", [(INTERVAL, SET, "7000")]))
    (answer,) = alter(apis, (group, ops))
    assert apis.coord.group_configs() == {"g": {INTERVAL: 7_000}}
    return answer.error_code, answer.error_message


def _entry(apis, group, name, synonyms=True, docs=True):
    body = {"resources": [{"resource_type": 32, "resource_name": group,
                           "configuration_keys": [name]}],
            "include_synonyms": synonyms, "include_documentation": docs}
    (result,) = _call(apis, 32, 4, body).results
    (entry,) = result.configs
    return entry


# ConfigHelper.describeConfigs / createGroupConfigEntry (ConfigHelper.scala)
def test_describe_without_synonyms_or_docs_still_gives_source_type_and_flags(impl):
    apis = _apis(impl)
    alter(apis, ("g", [(SESSION, SET, "50000")]))
    session = _entry(apis, "g", SESSION, synonyms=False, docs=False)
    interval = _entry(apis, "g", INTERVAL, synonyms=False, docs=False)
    assert (session.value, session.config_source, session.synonyms) == ("50000", SOURCE_GROUP, ())
    assert (interval.value, interval.config_source, interval.synonyms) == ("5000", SOURCE_DEFAULT, ())
    for entry in (session, interval):
        assert (entry.read_only, entry.is_sensitive, entry.config_type) == (False, False, TYPE_INT)
        assert entry.documentation is None


# ConfigHelper.createGroupConfigEntry: documentation is GroupConfig.documentationOf, i.e.
# GroupCoordinatorConfig.CONSUMER_GROUP_*_DOC
@pytest.mark.parametrize("name, doc", [
    (SESSION, "The timeout to detect client failures when using the consumer group protocol."),
    (INTERVAL, "The heartbeat interval given to the members of a consumer group."),
])
def test_describe_documentation_is_kafkas(impl, name, doc):
    assert _entry(_apis(impl), "g", name).documentation == doc


# ConfigHelper.configSynonyms: a broker value from server.properties (STATIC_BROKER_CONFIG)
# is followed by the same broker config's Kafka default (DEFAULT_CONFIG)
def test_synonyms_of_a_static_broker_value_end_with_kafkas_default(impl):
    apis = _apis(impl, group_consumer_heartbeat_interval_ms=6_000)
    alter(apis, ("g", [(INTERVAL, SET, "7000")]))
    entry = _entry(apis, "g", INTERVAL)
    broker = "group.consumer.heartbeat.interval.ms"
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        (INTERVAL, "7000", SOURCE_GROUP), (broker, "6000", SOURCE_STATIC_BROKER),
        (broker, "5000", SOURCE_DEFAULT)]


# ConfigHelper.createGroupConfigEntry: the value is ConfigDef.convertToString of the parsed
# int, so a value set with spaces or a sign is described as a plain number
def test_a_value_set_as_padded_text_is_described_as_the_parsed_int(impl):
    apis = _apis(impl)
    (answer,) = alter(apis, ("g", [(SESSION, SET, " 50000 "), (INTERVAL, SET, "+6000")]))
    assert answer.error_code == 0
    assert values(describe(apis, "g")) == {SESSION: ("50000", SOURCE_GROUP),
                                           INTERVAL: ("6000", SOURCE_GROUP)}


# ConfigHelper.describeConfigs (GROUP case): InvalidRequestException for an empty name
def test_describe_of_an_empty_group_name_has_kafkas_message(impl):
    result = describe(_apis(impl), "")
    assert (result.error_code, result.error_message, result.configs) == (
        INVALID_REQUEST, "Group name must not be empty", ())


# ControllerConfigurationValidator.validateGroupName
# (ControllerConfigurationValidatorTest.testInvalidGroupNameGroupConfig)
def test_alter_of_an_empty_group_name_has_kafkas_message(impl):
    assert _refused(impl, [(SESSION, SET, "50000")], group="") == (
        INVALID_REQUEST, "Default group resources are not allowed.")


# GroupConfig.validateNames (ControllerConfigurationValidatorTest.testInvalidGroupConfig)
def test_an_unknown_config_name_has_kafkas_message(impl):
    assert _refused(impl, [("consumer.session.timeout", SET, "50000")]) == (
        INVALID_CONFIG, "Unknown group config name: consumer.session.timeout")


# ConfigDef.parseType (NumberFormatException) and ConfigDef.Range.atLeast(1), raised as
# ConfigException and answered INVALID_CONFIG by ConfigurationControlManager.validateAlterConfig
@pytest.mark.parametrize("value, why", [
    ("x", "Not a number of type INT"),
    ("2147483648", "Not a number of type INT"),
    ("4.5", "Not a number of type INT"),
    ("0", "Value must be at least 1"),
])
def test_a_value_that_is_not_a_positive_int_has_configdefs_message(impl, value, why):
    assert _refused(impl, [(SESSION, SET, value)]) == (
        INVALID_CONFIG, f"Invalid value {value} for configuration {SESSION}: {why}")


# GroupConfig.validateValues (Kafka 4.0): each bound names the broker config it breaks
@pytest.mark.parametrize("name, value, message", [
    (SESSION, "44999", f"{SESSION} must be greater than or equal to "
                       "group.consumer.min.session.timeout.ms"),
    (SESSION, "60001", f"{SESSION} must be less than or equal to "
                       "group.consumer.max.session.timeout.ms"),
    (INTERVAL, "4999", f"{INTERVAL} must be greater than or equal to "
                       "group.consumer.min.heartbeat.interval.ms"),
    (INTERVAL, "15001", f"{INTERVAL} must be less than or equal to "
                        "group.consumer.max.heartbeat.interval.ms"),
])
def test_a_value_out_of_the_brokers_bounds_has_kafkas_message(impl, name, value, message):
    assert _refused(impl, [(name, SET, value)]) == (INVALID_CONFIG, message)


# GroupConfig.validateValues: the session timeout must exceed the heartbeat interval
def test_a_session_not_above_the_interval_has_kafkas_message(impl):
    assert _refused(impl, [(SESSION, SET, "46000"), (INTERVAL, SET, "46000")],
                    group_consumer_max_heartbeat_interval_ms=50_000) == (
        INVALID_CONFIG, f"{SESSION} must be greater than {INTERVAL}")


# ConfigurationControlManager.incrementalAlterConfigResource: APPEND / SUBTRACT of a key
# that is not a LIST (ConfigurationControlManagerTest.testIncrementalAlterConfigs)
@pytest.mark.parametrize("op, verb", [(APPEND, "APPEND"), (SUBTRACT, "SUBTRACT")])
def test_append_or_subtract_has_kafkas_message(impl, op, verb):
    assert _refused(impl, [(SESSION, op, "1")]) == (
        INVALID_CONFIG, f"Can't {verb} to key {SESSION} because its type is not LIST.")


# ConfigAdminManager.preprocess: a null value on any operation but DELETE
def test_a_set_with_a_null_value_is_invalid_request(impl):
    assert _refused(impl, [(INTERVAL, SET, None)]) == (
        INVALID_REQUEST, f"Null value not supported for : {INTERVAL}")


# ConfigAdminManager.preprocess: the same key twice in one resource, the same resource twice
def test_a_key_or_a_resource_named_twice_has_kafkas_message(impl):
    assert _refused(impl, [(SESSION, SET, "50000"), (SESSION, DELETE, None)]) == (
        INVALID_REQUEST, "Error due to duplicate config keys")
    apis = _apis(impl)
    answers = alter(apis, ("g", [(SESSION, SET, "50000")]), ("g", [(INTERVAL, SET, "6000")]))
    assert [(a.error_code, a.error_message) for a in answers] == [
        (INVALID_REQUEST, "Each resource must appear at most once.")] * 2
    assert apis.coord.group_configs() == {}


# ConfigurationControlManager.incrementalAlterConfigResource: DELETE of a key not set
# changes nothing and succeeds; the group then describes Kafka's defaults
def test_delete_of_a_config_not_set_succeeds(impl):
    apis = _apis(impl)
    (answer,) = alter(apis, ("g", [(SESSION, DELETE, None), (INTERVAL, DELETE, None)]))
    assert (answer.error_code, answer.error_message) == (0, None)
    assert apis.coord.group_configs() == {}
    assert values(describe(apis, "g")) == {SESSION: ("45000", SOURCE_DEFAULT),
                                           INTERVAL: ("5000", SOURCE_DEFAULT)}


# ControllerApis / ConfigurationControlManager.incrementalAlterConfigs(validateOnly): the
# same checks, the same answers, no change
def test_validate_only_answers_as_a_real_change_would_and_keeps_nothing(impl):
    apis = _apis(impl)
    bad, good = alter(apis, ("g", [(SESSION, SET, "1000")]), ("h", [(INTERVAL, SET, "6000")]),
                      validate_only=True)
    assert bad.error_code == INVALID_CONFIG and good.error_code == 0
    assert apis.coord.group_configs() == {}


# ConfigurationControlManager.incrementalAlterConfigs: each resource succeeds or fails alone
def test_a_refused_resource_does_not_hold_back_the_others(impl):
    apis = _apis(impl)
    bad, good = alter(apis, ("g", [(SESSION, SET, "x")]), ("h", [(SESSION, SET, "50000")]))
    assert (bad.resource_name, bad.error_code) == ("g", INVALID_CONFIG)
    assert (good.resource_name, good.error_code) == ("h", 0)
    assert apis.coord.group_configs() == {"h": {SESSION: 50_000}}
