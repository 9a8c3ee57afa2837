"""The Kafka error codes the request handlers answer besides the coordinator's own
(fastcoord.Errors): topics, records, fetch sessions, SASL and configs. Taken from kio's
ErrorCode, Kafka's table, as the plain ints the handlers put in responses, so that no
handler spells one as a bare number of its own."""
from __future__ import annotations

from kio.schema.errors import ErrorCode as _Code

NONE = int(_Code.none)
UNKNOWN_TOPIC_OR_PARTITION = int(_Code.unknown_topic_or_partition)
INVALID_TOPIC_EXCEPTION = int(_Code.invalid_topic_exception)
TOPIC_AUTHORIZATION_FAILED = int(_Code.topic_authorization_failed)
UNSUPPORTED_SASL_MECHANISM = int(_Code.unsupported_sasl_mechanism)
ILLEGAL_SASL_STATE = int(_Code.illegal_sasl_state)
UNSUPPORTED_VERSION = int(_Code.unsupported_version)
INVALID_CONFIG = int(_Code.invalid_config)
INVALID_REQUEST = int(_Code.invalid_request)
POLICY_VIOLATION = int(_Code.policy_violation)
SASL_AUTHENTICATION_FAILED = int(_Code.sasl_authentication_failed)
FETCH_SESSION_ID_NOT_FOUND = int(_Code.fetch_session_id_not_found)
FENCED_LEADER_EPOCH = int(_Code.fenced_leader_epoch)
UNKNOWN_LEADER_EPOCH = int(_Code.unknown_leader_epoch)
INVALID_RECORD = int(_Code.invalid_record)
UNKNOWN_TOPIC_ID = int(_Code.unknown_topic_id)
