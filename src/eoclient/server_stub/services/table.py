"""Every RPC the reference server answers, in one method table, and the one way to call one.

Each service module (``publisher``, ``subscriber``, ``iam_policy``, ``schemas``,
``broker_policies``) lists its own methods; ``Services`` puts them in one table keyed by
method name, and both doors run every unary call through ``Services.call``: the caller's
grant first, then injected faults, then the door-independent request checks, the
handler, the commit of what it changed, and what the method does after its answer. A
handler holds every check of its RPC itself: nothing wraps one handler in another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from eoclient.errors import RpcError, Unauthenticated, Unimplemented, rpc_error_class
from eoclient.server_stub.access.tokens import Grant, TokenTable, request_projects
from eoclient.server_stub.bigquery import BigQueryStandIn
from eoclient.server_stub.core import Broker
from eoclient.server_stub.group_commit import GroupCommit
from eoclient.server_stub.services import request_checks
from eoclient.server_stub.services.broker_policies import BrokerPoliciesService
from eoclient.server_stub.services.faults import RpcFaults
from eoclient.server_stub.services.iam_policy import IamPolicyService
from eoclient.server_stub.services.ingestion_settings import IngestionStates
from eoclient.server_stub.services.open_streams import StreamRegistry
from eoclient.server_stub.services.publisher import PublisherService
from eoclient.server_stub.services.pulsar_skip import PulsarSkip
from eoclient.server_stub.services.rpc import AfterAnswer, RpcMethod
from eoclient.server_stub.services.schemas import SchemaService
from eoclient.server_stub.services.streaming_pull import StreamingPullService
from eoclient.server_stub.services.subscriber import ExportStates, SubscriberService
from eoclient.server_stub.transforms import MessageTransforms, TransformLimits


@dataclass(frozen=True)
class EdgeStates:
    """What the services know of the rooms at the server's edge: the output-only states of
    import topics (the ingestion room's, with its news that a topic changed) and of export
    subscriptions (the export runner's), and the BigQuery stand-in that BigQuery
    subscriptions are checked against (None: they wait in NOT_FOUND)."""

    ingestion: IngestionStates | None = None
    exports: ExportStates | None = None
    bigquery: BigQueryStandIn | None = None


class Services:
    """The services of one broker, as both doors call them."""

    def __init__(
        self,
        broker: Broker,
        faults: RpcFaults | None = None,
        group_commit: GroupCommit | None = None,
        tokens: TokenTable | None = None,
        transform_limits: TransformLimits | None = None,
        edge: EdgeStates | None = None,
        streams: StreamRegistry | None = None,
    ) -> None:
        self.broker = broker
        self.faults = faults or RpcFaults()
        self.group_commit = group_commit or GroupCommit(broker.store)
        self.tokens = tokens
        edge = edge or EdgeStates()
        # The subscriber service keeps the unary Pulls waiting for a message: the
        # server wakes them (``notify``) when the broker has one.
        # Message transforms: the Publish handler, every Pull and StreamingPull, the push
        # sender and the exports run a resource's UDFs through this one stage.
        self.transforms = MessageTransforms(broker, transform_limits)
        self.subscriber = SubscriberService(
            broker, self.transforms, edge.exports, edge.bigquery, self.group_commit
        )
        # StreamingPull: a session per call (the gRPC door drives it), woken through the
        # open streams (``streams``: the server notifies and drops them).
        self.streaming_pull = StreamingPullService(
            broker,
            self.group_commit,
            self.transforms,
            streams or StreamRegistry(),
            self.faults,
            self.authorize,
        )
        # Pulsar's skip path on the REST door (``pulsar_skip``), run through ``call``.
        self.pulsar_skip = PulsarSkip(broker, self.call, self.authorize)
        self.methods: dict[str, RpcMethod] = _one_table(
            PublisherService(broker, self.transforms, edge.ingestion).methods(),
            self.subscriber.methods(),
            IamPolicyService(broker).methods(),
            SchemaService(broker).methods(),
            BrokerPoliciesService(broker).methods(),
        )

    def authenticate(self, authorization: str | None) -> Grant | None:
        """The caller's grant, from its ``authorization`` value (UNAUTHENTICATED without
        a known bearer token); None when the server takes no tokens."""
        if self.tokens is None:
            return None
        return self.tokens.authenticate(authorization)

    def authorize(self, grant: Grant | None, request: Message) -> None:
        """PERMISSION_DENIED unless ``grant`` covers every project the request names."""
        if self.tokens is not None:
            if grant is None:  # a door that did not authenticate: never let it through
                raise Unauthenticated("Request is missing required authentication credential.")
            grant.authorize(request_projects(request))

    async def call(
        self,
        method: str,
        request: Message,
        handler: Callable[[Any], Awaitable[Any]] | None = None,
        grant: Grant | None = None,
    ) -> Any:
        """Run the unary RPC ``method`` (e.g. ``"Publish"``) for either door.

        The caller's ``grant`` (``authenticate``) is checked first, then injected
        faults for ``method``, then the request; failures raise ``RpcError`` (an
        ``ExactlyOnceAckFailure`` for exactly-once ack failures). ``handler`` replaces
        the method's own for one door (the gRPC door's pre-encoded Pull).
        """
        rpc = self.methods.get(method)
        if rpc is None:
            raise Unimplemented(f"Method google.pubsub.v1 {method} is not implemented.")
        self.authorize(grant, request)
        injected = self.faults.take(method)
        if injected is not None:
            raise rpc_error_class(injected.code)(injected.message)
        request_checks.check_renderable(request)
        # Nothing leaves before the store has it (group_commit.py): not the result, and
        # not an exactly-once failure either, which reports the request's other ids done.
        # The one exception is the method's own (``RpcMethod.answer_after_commit``): a
        # successful answer that promises nothing a crash could break.
        try:
            result = await (handler or rpc.handler)(request)
        except RpcError:
            await self.group_commit.durable()
            raise
        if rpc.answer_after_commit(request):
            await self.group_commit.durable()
        if rpc.after_answer is not None:
            # Run once this task has handed the answer to the door and the loop turns:
            # the client is reading it meanwhile.
            asyncio.get_running_loop().call_soon(self._after_answer, rpc.after_answer, request)
        return result

    def _after_answer(self, work: AfterAnswer, request: Message) -> None:
        """``work`` for ``request``, unless a commit is running: the store's reads wait
        for it, and the loop would wait with them (the work is an optimisation only)."""
        if not self.group_commit.in_flight:
            work(request)


def _one_table(*services: Iterable[RpcMethod]) -> dict[str, RpcMethod]:
    table: dict[str, RpcMethod] = {}
    for methods in services:
        for rpc in methods:
            # Both doors look a method up by its bare name (the REST bindings, the
            # faults a test injects): two services may never share one.
            assert rpc.name not in table, f"{rpc.name} is served twice"
            table[rpc.name] = rpc
    return table
