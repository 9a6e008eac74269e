"""The security domain's errors and the Kafka error code each one means (:data:`ERROR_CODES`).

    InvalidAcl          (acl.py) a binding Kafka refuses to create: INVALID_REQUEST (CreateAcls answers it per creation)
    PlainError          (plain.py) a malformed SASL PLAIN message: SASL_AUTHENTICATION_FAILED
    ScramError          (scram.py) a malformed SCRAM message or a failed check: SASL_AUTHENTICATION_FAILED
    OAuthBearerError    (oauthbearer.py) a refused OAUTHBEARER exchange: SASL_AUTHENTICATION_FAILED
    NotPermitted        (sql_access.py) a SQL statement the principal may not run (a StorageError, answered over HTTP
                        with TDengine's code): TOPIC_AUTHORIZATION_FAILED, TDengine's objects being topic resources

The gateway answers the SASL ones itself (``gateway/kafka/sasl.py``: one SASL_AUTHENTICATION_FAILED message that names
no secret); the table is merged with the other domains' at the gateway's edge (``gateway/kafka/handlers/common.py``),
so that none of them can reach a Kafka client as UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from kio.schema.errors import ErrorCode

from walgate.security.acl import InvalidAcl
from walgate.security.oauthbearer import OAuthBearerError
from walgate.security.plain import PlainError
from walgate.security.scram import ScramError
from walgate.security.sql_access import NotPermitted

__all__ = ["ERROR_CODES"]

ERROR_CODES: Final[Mapping[type[BaseException], ErrorCode]] = {
    InvalidAcl: ErrorCode.invalid_request,
    PlainError: ErrorCode.sasl_authentication_failed,
    ScramError: ErrorCode.sasl_authentication_failed,
    OAuthBearerError: ErrorCode.sasl_authentication_failed,
    NotPermitted: ErrorCode.topic_authorization_failed,
}
"""The security domain's errors as Kafka answers them (see the module docstring)."""
