"""One unary RPC as the method table holds it: the vocabulary every service module shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

Handler = Callable[[Any], Awaitable[Message]]
# Whether a request's answer must wait for the commit of what its handler changed.
CommitRule = Callable[[Any], bool]
# Work for after a successful answer, given the request: run once the answer is on its way.
AfterAnswer = Callable[[Any], None]


def always(_request: Any) -> bool:
    return True


@dataclass(frozen=True)
class RpcMethod:
    """One unary RPC: its service's full name, its handler and its message classes, and
    whether an answer waits for the commit of the handler's changes (``answer_after_commit``
    of the request: every method's answer does, unless its service says otherwise), and
    what the server does after a successful answer while the client reads it
    (``after_answer``: ``Services.call``)."""

    service: str  # "google.pubsub.v1.Publisher", "google.iam.v1.IAMPolicy", ...
    name: str
    handler: Handler
    request: type[Message]
    response: type[Message]
    answer_after_commit: CommitRule = always
    after_answer: AfterAnswer | None = None


def rpc_methods(service: str, table: dict[str, tuple[Handler, Any, Any]]) -> list[RpcMethod]:
    """The methods of ``service`` from its table: name → (handler, request, response)."""
    return [
        RpcMethod(service, name, handler, request, response)
        for name, (handler, request, response) in table.items()
    ]
