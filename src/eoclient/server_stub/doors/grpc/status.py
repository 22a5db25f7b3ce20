"""The gRPC door's helpers: canonical status names (``RpcError.code``) -> grpc.aio call
statuses, and the call's credentials."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from eoclient.errors import RpcError
from eoclient.server_stub.doors.grpc import ack_failure_trailer
from eoclient.server_stub.doors.grpc.ack_failure_trailer import STATUS_DETAILS_KEY
from eoclient.server_stub.services.errors import ExactlyOnceAckFailure

_CODE_BY_NAME: dict[str, grpc.StatusCode] = {c.name: c for c in grpc.StatusCode}


def status_code(name: str) -> grpc.StatusCode:
    """The grpc status code of a canonical code name (``"NOT_FOUND"``)."""
    return _CODE_BY_NAME.get(name, grpc.StatusCode.UNKNOWN)


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: RpcError) -> NoReturn:
    """End the call with ``error``'s status (and its rich status, if it has one)."""
    if isinstance(error, ExactlyOnceAckFailure):
        # As many failed ids as a trailer every client reads holds; the Status repeats the
        # call's code and message exactly (ack_failure_trailer.py).
        limit = ack_failure_trailer.budget(context.invocation_metadata())
        message, status = ack_failure_trailer.fit(error.error_info, error.message, limit)
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            message,
            trailing_metadata=((STATUS_DETAILS_KEY, status.SerializeToString()),),
        )
    await context.abort(status_code(error.code), error.message)


def authorization(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The call's ``authorization`` metadata value, if it has one."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode("latin-1")
    return None
