"""The dashboard as a page the REST door mounts (package docstring: what it shows and who
may see it): which paths are its, the data each page shows (gathered here, rendered by
``overview``, ``topic_page`` and ``subscription_page``), and the actions, run through the
services' method table as the same RPC from a client would be."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from eoclient._clock import Clock
from eoclient._proto import broker_policies_pb2, pubsub_pb2
from eoclient.errors import InvalidArgument, NotFound, PermissionDenied
from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.core.model import SnapshotView
from eoclient.server_stub.core.schemas import SchemaRevision
from eoclient.server_stub.doors.rest.errors import HttpProblem
from eoclient.server_stub.observe.dashboard import (
    formats,
    overview,
    subscription_page,
    topic_page,
)
from eoclient.server_stub.observe.dashboard.edges import EdgeRooms, Edges
from eoclient.server_stub.observe.dashboard.frame import HOME
from eoclient.server_stub.observe.dashboard.stats_history import SAMPLE_SECONDS, StatsHistory
from eoclient.server_stub.services.table import Services

PEEK_MESSAGES = 20
# Most snapshots and schemas the overview lists (of each, over every project).
LISTED_RESOURCES = 1000
MAX_ACTION_BYTES = 64 * 1024  # a form's JSON; skip lists of thousands of ids still fit
HTML = "text/html; charset=utf-8"


def _project(name: str) -> str:
    return name.split("/")[1] if name.count("/") >= 3 else ""


class Dashboard:
    def __init__(self, services: Services, clock: Clock, rooms: EdgeRooms | None = None) -> None:
        self.services = services
        self.clock = clock
        self.history = StatsHistory()
        # Exports, ingestion and transforms, read from the server's edge rooms.
        self.edges = Edges(services.transforms, rooms)

    async def sample_forever(self) -> None:
        # Real seconds, like the server's ticker; the samples carry the server's clock
        # (a test on a FakeClock calls ``sample`` itself after advancing it).
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_SECONDS)

    def sample(self) -> None:
        self.history.record(self.clock.now(), self.services.broker.stats())

    def matches(self, path: str) -> bool:
        return path in ("/", HOME) or path.startswith(HOME + "/")

    async def response(
        self, request: web.Request, grant: Grant | None, cors: dict[str, str]
    ) -> web.Response:
        """The REST door's answer to the dashboard's paths (after its browser and token
        checks; its pages are the server's own origin, so ``cors`` adds nothing)."""
        token = request.query.get("access_token")
        if request.method == "GET" and request.path in ("/", HOME, HOME + "/"):
            return web.Response(text=self._overview(grant, token), content_type="text/html")
        if request.method == "GET" and request.path == "/dashboard/topic":
            text = self._topic(request.query.get("name", ""), grant, token)
            return web.Response(text=text, content_type="text/html")
        if request.method == "GET" and request.path == "/dashboard/subscription":
            name = request.query.get("name", "")
            text = await self._subscription(name, grant, token)
            return web.Response(text=text, content_type="text/html")
        if request.method == "POST" and request.path == "/dashboard/action":
            return web.json_response({"message": await self._action(request, grant)})
        raise HttpProblem(
            404, "NOT_FOUND", f"The dashboard has no {request.method} {request.path}."
        )

    def _visible(self, name: str, grant: Grant | None) -> bool:
        return grant is None or grant.every_project or _project(name) in grant.projects

    def _overview(self, grant: Grant | None, token: str | None) -> str:
        stats = self.services.broker.stats()
        broker, history = self.services.broker, self.history
        per_topic = Counter(s.topic for s in stats.subscriptions)
        topics = [
            overview.TopicRow(t, history.publish_rate(t.name), per_topic[t.name])
            for t in sorted(stats.topics, key=lambda t: t.name)
            if self._visible(t.name, grant)
        ]
        subscriptions = [
            overview.SubscriptionRow(
                s, broker.subscriptions.get(s.name), history.rates(s.name), history.samples(s.name)
            )
            for s in sorted(stats.subscriptions, key=lambda s: s.name)
            if self._visible(s.name, grant)
        ]
        edges = self.edges.rows(
            (row.view for row in subscriptions),
            (broker.topics.get(row.stats.name) for row in topics),
        )
        data = overview.OverviewData(
            topics, subscriptions, self._snapshots(grant), self._schemas(grant), token, edges
        )
        return overview.render(data)

    def _projects(self, names: Iterable[str], grant: Grant | None) -> list[str]:
        return sorted({_project(n) for n in names if self._visible(n, grant)})

    def _snapshots(self, grant: Grant | None) -> list[SnapshotView]:
        snapshots = self.services.broker.snapshots
        found: list[SnapshotView] = []
        for project in self._projects(snapshots.records, grant):
            found += snapshots.list(f"projects/{project}", LISTED_RESOURCES, "").items
        return found[:LISTED_RESOURCES]

    def _schemas(self, grant: Grant | None) -> list[SchemaRevision]:
        schemas = self.services.broker.schemas
        found: list[SchemaRevision] = []
        for project in self._projects(schemas.schemas, grant):
            found += schemas.list_schemas(f"projects/{project}", LISTED_RESOURCES, "").items
        return found[:LISTED_RESOURCES]

    async def _subscription(self, name: str, grant: Grant | None, token: str | None) -> str:
        if not self._visible(name, grant):
            raise PermissionDenied(f"The token may not use project {_project(name)!r}.")
        broker = self.services.broker
        view = broker.subscriptions.get(name)  # NotFound for an unknown name
        stats = next((s for s in broker.stats().subscriptions if s.name == name), None)
        if stats is None:  # an internal subscription (a topic's retention cursor)
            raise NotFound(f"Resource not found (resource={name}).")
        snapshots = broker.snapshots.list_for_topic(view.config.topic, LISTED_RESOURCES, "")
        data = subscription_page.SubscriptionData(
            stats,
            view,
            self.history.rates(name),
            self.history.samples(name),
            self.history.rate_series(name),
            broker.peek(name, PEEK_MESSAGES),
            snapshots.items,
            token,
            self.edges.export(view),
            self.edges.subscription_transforms(view),
        )
        return subscription_page.render(data)

    def _topic(self, name: str, grant: Grant | None, token: str | None) -> str:
        if not self._visible(name, grant):
            raise PermissionDenied(f"The token may not use project {_project(name)!r}.")
        broker = self.services.broker
        view = broker.topics.get(name)  # NotFound for an unknown name
        stats = broker.stats()
        topic = next((t for t in stats.topics if t.name == name), None)
        if topic is None:
            raise NotFound(f"Resource not found (resource={name}).")
        subscriptions = sorted(
            (s for s in stats.subscriptions if s.topic == name), key=lambda s: s.name
        )
        data = topic_page.TopicData(
            topic,
            view,
            subscriptions,
            broker.snapshots.list_for_topic(name, LISTED_RESOURCES, "").items,
            self.history.publish_rate(name),
            self.history.publish_rate_series(name),
            token,
            self.edges.ingestion(view),
            self.edges.topic_transforms(view),
        )
        return topic_page.render(data)

    async def _action(self, request: web.Request, grant: Grant | None) -> str:
        body = await request.content.read(MAX_ACTION_BYTES + 1)
        if len(body) > MAX_ACTION_BYTES:
            raise HttpProblem(413, "INVALID_ARGUMENT", "The action is larger than 64 KiB.")
        try:
            fields: dict[str, Any] = json.loads(body)
            action = str(fields["action"])
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidArgument(
                f"A dashboard action is a JSON object with action: {error}"
            ) from None
        call = self.services.call
        if action in _RESOURCE_ACTIONS:
            return await self._resource_action(action, fields, grant)
        subscription = str(fields.get("subscription", ""))
        if action in ("seek-time", "purge"):
            at = self.clock.now() if action == "purge" else _utc_seconds(fields.get("time"))
            seek = pubsub_pb2.SeekRequest(subscription=subscription)
            seek.time.FromNanoseconds(int(at * 1e9))
            await call("Seek", seek, grant=grant)
            when = formats.when(at)
            return (
                f"Purged {subscription}."
                if action == "purge"
                else f"Sought {subscription} to {when}."
            )
        if action == "seek-snapshot":
            snapshot = str(fields.get("snapshot", ""))
            await call(
                "Seek",
                pubsub_pb2.SeekRequest(subscription=subscription, snapshot=snapshot),
                grant=grant,
            )
            return f"Sought {subscription} to {snapshot}."
        if action == "skip":
            ids = [
                i.strip()
                for i in str(fields.get("message_ids", "")).replace(",", " ").split()
                if i.strip()
            ]
            if not ids:
                raise InvalidArgument(
                    "Give the message ids to skip, separated by commas or spaces."
                )
            request_pb = broker_policies_pb2.SkipMessagesRequest(
                subscription=subscription, message_ids=ids
            )
            answer = await call("SkipMessages", request_pb, grant=grant)
            outcomes = [
                f"{m.message_id}: {broker_policies_pb2.SkippedMessage.Outcome.Name(m.outcome)}"
                for m in answer.results
            ]
            return "Skipped — " + ", ".join(outcomes)
        if action == "detach":
            await call(
                "DetachSubscription",
                pubsub_pb2.DetachSubscriptionRequest(subscription=subscription),
                grant=grant,
            )
            return f"Detached {subscription}."
        raise InvalidArgument(
            f"Unknown dashboard action {action!r} (seek-time, seek-snapshot, purge, skip, detach)."
        )

    async def _resource_action(
        self, action: str, fields: dict[str, Any], grant: Grant | None
    ) -> str:
        """Create a topic or a subscription, or publish one message (the first steps of
        trying a subscriber out), through the service like any client's request."""
        call = self.services.call
        topic = str(fields.get("topic", "")).strip()
        if action == "create-topic":
            await call("CreateTopic", pubsub_pb2.Topic(name=topic), grant=grant)
            return f"Created {topic}."
        if action == "create-subscription":
            name = str(fields.get("subscription", "")).strip()
            subscription = pubsub_pb2.Subscription(
                name=name,
                topic=topic,
                enable_exactly_once_delivery=bool(fields.get("exactly_once")),
                enable_message_ordering=bool(fields.get("ordering")),
                retain_acked_messages=bool(fields.get("retain_acked")),
            )
            await call("CreateSubscription", subscription, grant=grant)
            return f"Created {name} on {topic}."
        message = pubsub_pb2.PubsubMessage(
            data=str(fields.get("data", "")).encode(),
            ordering_key=str(fields.get("ordering_key", "")),
        )
        answer = await call(
            "Publish", pubsub_pb2.PublishRequest(topic=topic, messages=[message]), grant=grant
        )
        return f"Published message {answer.message_ids[0]} to {topic}."


_RESOURCE_ACTIONS = ("create-topic", "create-subscription", "publish")


def _utc_seconds(value: object) -> float:
    """A ``datetime-local`` input's value (``YYYY-MM-DDTHH:MM[:SS]``), read as UTC."""
    try:
        parsed = datetime.datetime.fromisoformat(str(value))
    except ValueError:
        raise InvalidArgument(
            f"Not a date and time: {value!r} (YYYY-MM-DDTHH:MM:SS, UTC)."
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()
