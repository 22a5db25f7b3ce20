"""The fuzzed server and the checks made after every example.

``Target`` runs the reference server in a thread (``ServerThread``) and talks to it with
blocking clients (grpc's sync channel, ``http.client``), so Hypothesis drives plain
functions. After each example ``check_alive()`` proves the server is still whole:

* a sentinel message published to an exactly-once subscription of another project is
  delivered exactly once, acknowledged with SUCCESS, and not delivered again;
* every list and get of the fuzzed project answers, over gRPC and as JSON (a stored value
  that cannot be rendered used to make every later read fail);
* nothing was logged at ERROR (the doors log a request that met a bug).
"""

from __future__ import annotations

import http.client
import itertools
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf.message import Message

from eoclient._clock import SystemClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.pytest_plugin.server_thread import ServerThread
from eoclient.server_stub.core import Broker
from eoclient.server_stub.services.table import Services

from ._strategies import ACK_PLACEHOLDERS, NEW, PROJECT, SNAPSHOTS, SUBSCRIPTIONS, TOPICS

# How many examples each fuzz test runs: CI-sized by default; raise it for a long hunt
# (EOCLIENT_FUZZ_EXAMPLES=2000 ./dev test tests/fuzz).
EXAMPLES = int(os.environ.get("EOCLIENT_FUZZ_EXAMPLES", "25"))
# CI runs the same examples every time; EOCLIENT_FUZZ_RANDOM=1 draws new ones each run.
DERANDOMIZE = os.environ.get("EOCLIENT_FUZZ_RANDOM") != "1"
CALL_TIMEOUT = 10.0  # seconds; a unary call or a half-closed stream must answer in this

# What the doors may answer without authentication configured: the documented client
# errors, and UNIMPLEMENTED for the parts not served (push config, IAM, schemas).
# Never UNKNOWN, INTERNAL or DEADLINE_EXCEEDED (a hang).
DOCUMENTED = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ABORTED,  # google.iam.v1: a policy's etag is stale
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
DOCUMENTED_HTTP = frozenset({200, 204, 400, 403, 404, 405, 409, 415, 429, 501})

KEEP_CREATED = 12  # resources examples created that stay (reads check them all each time)
_DELETES: dict[str, Any] = {
    "topics": lambda name: ("DeleteTopic", pb.DeleteTopicRequest(topic=name)),
    "subscriptions": lambda name: (
        "DeleteSubscription",
        pb.DeleteSubscriptionRequest(subscription=name),
    ),
    "snapshots": lambda name: ("DeleteSnapshot", pb.DeleteSnapshotRequest(snapshot=name)),
}

SENTINEL_TOPIC = "projects/sentinel/topics/sentinel"
SENTINEL_SUBSCRIPTION = "projects/sentinel/subscriptions/sentinel"


def _method_table() -> dict[str, tuple[str, type[Message]]]:
    """Every method the server serves (google.pubsub.v1 and what else its service table
    holds, e.g. google.iam.v1.IAMPolicy): name → (gRPC path, request class)."""
    services = Services(Broker(SystemClock()))
    table = {
        name: (f"/{rpc.service}/{name}", rpc.request) for name, rpc in services.methods.items()
    }
    table["StreamingPull"] = (
        "/google.pubsub.v1.Subscriber/StreamingPull",
        pb.StreamingPullRequest,
    )
    return table


METHODS = _method_table()


class ErrorLog(logging.Handler):
    """Collects ERROR records from any thread (the server's included)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Target:
    def __init__(self) -> None:
        self.server = ServerThread(record_history=False)
        self.server.start()
        self.channel = grpc.insecure_channel(self.server.address)
        self.rest_host, _, port = self.server.rest_url.removeprefix("http://").rpartition(":")
        self.rest_port = int(port)
        self.ack_ids: list[str] = []
        self._sentinels = itertools.count()
        self._examples = itertools.count()
        self._fresh = itertools.count()
        self.created: list[tuple[str, str]] = []
        self.errors = ErrorLog()
        logging.getLogger().addHandler(self.errors)
        self._setup_sentinel()

    def close(self) -> None:
        logging.getLogger().removeHandler(self.errors)
        self.channel.close()
        self.server.stop()

    # ------------------------------------------------------------------ calls

    def unary(self, method: str, request: Message | bytes) -> tuple[grpc.StatusCode, Any]:
        """Call ``method`` with a request (encoded or not); (status, response bytes)."""
        raw = request if isinstance(request, bytes) else request.SerializeToString()
        call = self.channel.unary_unary(METHODS[method][0])
        try:
            return grpc.StatusCode.OK, call(raw, timeout=CALL_TIMEOUT)
        except grpc.RpcError as error:
            return error.code(), error.details()

    def ok(self, method: str, request: Message, response: type[Message]) -> Any:
        code, answer = self.unary(method, request)
        assert code == grpc.StatusCode.OK, (method, code, answer)
        return response.FromString(answer)

    def stream(self, requests: list[bytes]) -> tuple[grpc.StatusCode, str, int]:
        """Send ``requests`` on one StreamingPull, half-close, read to the end."""
        call = self.channel.stream_stream(METHODS["StreamingPull"][0])
        responses = 0
        try:
            for _ in call(iter(requests), timeout=CALL_TIMEOUT):
                responses += 1
        except grpc.RpcError as error:
            return error.code(), error.details() or "", responses
        return grpc.StatusCode.OK, "", responses

    def http(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        connection = http.client.HTTPConnection(
            self.rest_host, self.rest_port, timeout=CALL_TIMEOUT
        )
        try:
            connection.putrequest(method, path, skip_host="Host" in headers)
            for name, value in headers.items():
                connection.putheader(name, value)
            if body is not None:
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            return response.status, response.getheader("Content-Type") or "", response.read()
        finally:
            connection.close()

    def fill_placeholders(self, request: Message) -> Message:
        """Replace ``@ACK<n>`` with ack ids the server really issued, and ``@NEW-...``
        with names no resource has (creations then succeed, storing what was drawn)."""
        for field, value in request.ListFields():
            if field.message_type is not None:
                if field.message_type.GetOptions().map_entry:
                    continue
                items = value if field.is_repeated else [value]
                for item in items:
                    self.fill_placeholders(item)
            elif field.cpp_type == field.CPPTYPE_STRING and field.type != field.TYPE_BYTES:
                if field.is_repeated:
                    for index, text in enumerate(value):
                        value[index] = self._filled(text)
                else:
                    setattr(request, field.name, self._filled(value))
        return request

    def fill_name(self, text: str) -> str:
        """``fill_placeholders`` for one string (a resource name in a REST path)."""
        return self._filled(text)

    def _filled(self, text: str) -> str:
        if text in ACK_PLACEHOLDERS:
            if not self.ack_ids:
                return text
            return self.ack_ids[-1 - ACK_PLACEHOLDERS.index(text) % len(self.ack_ids)]
        for kind, placeholder in NEW.items():
            if text == placeholder:
                name = f"{PROJECT}/{kind}/{kind[0]}-new-{next(self._fresh)}"
                self.created.append((kind, name))
                return name
        return text

    # ----------------------------------------------------------- the baseline

    def baseline(self) -> None:
        """Before an example: the fuzzed topic, subscriptions and snapshot exist, with
        messages; only the last few resources the examples created are kept."""
        self.unary("CreateTopic", pb.Topic(name=TOPICS[0]))
        self.unary(
            "CreateSubscription",
            pb.Subscription(
                name=SUBSCRIPTIONS[0], topic=TOPICS[0], enable_exactly_once_delivery=True
            ),
        )
        self.unary("CreateSubscription", pb.Subscription(name=SUBSCRIPTIONS[1], topic=TOPICS[0]))
        self.unary(
            "CreateSnapshot",
            pb.CreateSnapshotRequest(name=SNAPSHOTS[0], subscription=SUBSCRIPTIONS[1]),
        )
        while len(self.created) > KEEP_CREATED:
            kind, name = self.created.pop(0)
            method, request = _DELETES[kind](name)
            self.unary(method, request)
        if next(self._examples) % 5 == 0:
            self.unary(
                "Publish",
                pb.PublishRequest(topic=TOPICS[0], messages=[pb.PubsubMessage(data=b"x")] * 3),
            )
            for sub in SUBSCRIPTIONS:
                pull = pb.PullRequest(subscription=sub, max_messages=3, return_immediately=True)
                code, answer = self.unary("Pull", pull)
                if code == grpc.StatusCode.OK:
                    received = pb.PullResponse.FromString(answer).received_messages
                    self.ack_ids.extend(m.ack_id for m in received)
            del self.ack_ids[:-16]

    # ------------------------------------------------------------- the checks

    def _setup_sentinel(self) -> None:
        self.ok("CreateTopic", pb.Topic(name=SENTINEL_TOPIC), pb.Topic)
        self.ok(
            "CreateSubscription",
            pb.Subscription(
                name=SENTINEL_SUBSCRIPTION,
                topic=SENTINEL_TOPIC,
                enable_exactly_once_delivery=True,
                ack_deadline_seconds=600,
            ),
            pb.Subscription,
        )

    def check_alive(self) -> None:
        assert not self.errors.records, [r.getMessage() for r in self.errors.records]
        self._check_sentinel()
        self._check_reads()

    def _check_sentinel(self) -> None:
        data = f"sentinel-{next(self._sentinels)}".encode()
        published = self.ok(
            "Publish",
            pb.PublishRequest(topic=SENTINEL_TOPIC, messages=[pb.PubsubMessage(data=data)]),
            pb.PublishResponse,
        )
        received = list(self._pull_sentinel())
        assert [(m.message.message_id, m.message.data) for m in received] == [
            (published.message_ids[0], data)
        ], received
        self.ok(
            "Acknowledge",
            pb.AcknowledgeRequest(subscription=SENTINEL_SUBSCRIPTION, ack_ids=[received[0].ack_id]),
            pb.AcknowledgeRequest,  # Empty: any message type parses b""
        )
        assert list(self._pull_sentinel(wait=False)) == []

    def _pull_sentinel(self, wait: bool = True) -> Iterator[pb.ReceivedMessage]:
        deadline = time.monotonic() + (5.0 if wait else 0.0)
        while True:
            response = self.ok(
                "Pull",
                pb.PullRequest(
                    subscription=SENTINEL_SUBSCRIPTION, max_messages=10, return_immediately=True
                ),
                pb.PullResponse,
            )
            if response.received_messages or time.monotonic() >= deadline:
                yield from response.received_messages
                return
            time.sleep(0.01)

    def _check_reads(self) -> None:
        # A list renders every resource it names, in full (topics, subscriptions with
        # their configs, snapshots): one call per kind covers every stored value.
        for kind in ("topics", "subscriptions", "snapshots"):
            status, content_type, body = self.http(
                "GET", f"/v1/{PROJECT}/{kind}?pageSize=1000", None, {}
            )
            assert status == 200, (kind, status, body[:500])
            assert content_type.startswith("application/json")
        for method, request in (
            ("ListTopics", pb.ListTopicsRequest(project=PROJECT)),
            ("ListSubscriptions", pb.ListSubscriptionsRequest(project=PROJECT)),
            ("ListSnapshots", pb.ListSnapshotsRequest(project=PROJECT)),
        ):
            code, answer = self.unary(method, request)
            assert code == grpc.StatusCode.OK, (method, code, answer)


def assert_documented(code: grpc.StatusCode, details: Any, what: str) -> None:
    assert code in DOCUMENTED, f"{what}: {code} {details!r}"


def assert_http_documented(status: int, content_type: str, body: bytes, what: str) -> None:
    assert status in DOCUMENTED_HTTP, f"{what}: {status} {body[:500]!r}"
    if status == 204:
        return
    assert content_type.startswith("application/json"), f"{what}: {content_type} {body[:200]!r}"
    document = json.loads(body)
    if status >= 400:
        error = document["error"]
        assert error["code"] == status, (what, error)
        assert isinstance(error["message"], str), error
        assert isinstance(error["status"], str), error
