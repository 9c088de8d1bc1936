"""Reading a name-server request's header fields: required, integer (Java's ``Integer.parseInt``
rules), boolean (``Boolean.parseBoolean``), and rocketq's DLedger term. A missing required field
or a non-integer raises :class:`~rocketq.errors.RequestHeaderError` naming the request code and
the field, which the server answers with its wire code."""

from __future__ import annotations

from rocketq.errors import RequestHeaderError
from rocketq.protocol.route import DLEDGER_TERM_FIELD
from rocketq.remoting import RemotingCommand


def field(request: RemotingCommand, name: str) -> str:
    value = request.ext_fields.get(name)
    if value is None:
        raise RequestHeaderError(f"request code {request.code}: required header field {name!r} is missing")
    return value


def int_field(request: RemotingCommand, name: str, default: int | None = None) -> int:
    value = request.ext_fields.get(name)
    if value is None:
        if default is None:
            raise RequestHeaderError(
                f"request code {request.code}: required header field {name!r} is missing"
            )
        return default
    try:
        return int(value.strip())
    except ValueError:
        raise RequestHeaderError(
            f"request code {request.code}: header field {name!r} is not an integer: {value!r:.40}"
        ) from None


def bool_field(request: RemotingCommand, name: str) -> bool | None:
    """Java ``Boolean.parseBoolean``; None when absent."""
    value = request.ext_fields.get(name)
    return None if value is None else value.strip().lower() == "true"


def term_field(request: RemotingCommand) -> int | None:
    """The registering broker's DLedger term; None when not sent (not a DLedger broker)."""
    if request.ext_fields.get(DLEDGER_TERM_FIELD) is None:
        return None
    return int_field(request, DLEDGER_TERM_FIELD)
