"""Push delivery to a real local HTTP receiver (aiohttp on 127.0.0.1,
port 0): the wrapped and unwrapped formats, attributes, ack on 2xx, redelivery after a
failure (retry policy or push backoff), a receiver that fails, hangs and recovers, dead
letters, ordering keys, exactly-once refused, OIDC claims, ModifyPushConfig between push
and pull, and the delivery metrics."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from aiohttp import web
from support.wire import Wire, unique

from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer, run_server

WAIT = 10.0


@dataclass
class Push:
    body: bytes
    headers: dict[str, str]
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP endpoint that records pushes and answers what ``answer`` decides."""

    answer: Callable[[Push, int], Awaitable[int]] | None = None
    pushes: list[Push] = field(default_factory=list)
    url: str = ""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        push = Push(await request.read(), dict(request.headers), time.monotonic())
        self.pushes.append(push)
        self.changed.set()
        status = 200 if self.answer is None else await self.answer(push, len(self.pushes))
        return web.Response(status=status)

    async def wait_for(self, count: int, timeout: float = WAIT) -> list[Push]:
        async def enough() -> None:
            while len(self.pushes) < count:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(enough(), timeout)
        return self.pushes

    def data(self) -> list[bytes]:
        return [base64.b64decode(p.json()["message"].get("data", "")) for p in self.pushes]


@pytest.fixture
async def server() -> AsyncIterator[ReferenceServer]:
    async with run_server() as srv:
        yield srv


@pytest.fixture
async def wire(server: ReferenceServer) -> AsyncIterator[Wire]:
    client = Wire(server.address)
    yield client
    await client.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    made = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", made.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    made.url = f"http://127.0.0.1:{runner.addresses[0][1]}/push"
    yield made
    await runner.cleanup()


def retry(minimum: float, maximum: float) -> pb.RetryPolicy:
    policy = pb.RetryPolicy()
    policy.minimum_backoff.FromTimedelta(datetime.timedelta(seconds=minimum))
    policy.maximum_backoff.FromTimedelta(datetime.timedelta(seconds=maximum))
    return policy


async def push_subscription(
    wire: Wire, endpoint: str, topic: str | None = None, **fields: Any
) -> tuple[str, str]:
    push = fields.pop("push_config", pb.PushConfig(push_endpoint=endpoint))
    return await wire.subscription(topic, push_config=push, **fields)


async def settled(server: ReferenceServer, subscription: str, timeout: float = WAIT) -> None:
    """Wait until the subscription's backlog is empty (every push acknowledged)."""
    deadline = time.monotonic() + timeout
    while server.broker.backlog(subscription):
        assert time.monotonic() < deadline, server.push.metrics(subscription)
        await asyncio.sleep(0.02)


async def test_wrapped_pushes_with_attributes_are_acked_on_200(
    server: ReferenceServer, wire: Wire, receiver: Receiver
) -> None:
    topic, sub = await push_subscription(wire, receiver.url)
    request = pb.PublishRequest(
        topic=topic,
        messages=[
            pb.PubsubMessage(data=b"hello", attributes={"color": "red"}),
            pb.PubsubMessage(attributes={"only": "attributes"}),
        ],
    )
    ids = (await wire.Publish(request)).message_ids
    pushes = await receiver.wait_for(2)
    await settled(server, sub)
    bodies = sorted((p.json() for p in pushes), key=lambda b: b["message"]["messageId"])
    first, second = bodies
    assert first["subscription"] == sub
    message = first["message"]
    assert base64.b64decode(message["data"]) == b"hello"
    assert message["attributes"] == {"color": "red"}
    assert message["messageId"] == message["message_id"] == ids[0]
    assert message["publishTime"] == message["publish_time"]
    assert message["publishTime"].endswith("Z")
    assert "deliveryAttempt" not in first  # no dead-letter policy
    assert "data" not in second["message"]
    assert pushes[0].headers["Content-Type"] == "application/json"
    metrics = server.push.metrics(sub)
    assert (metrics.attempts, metrics.successes, metrics.failures) == (2, 2, 0)
    assert metrics.statuses[200] == 2
    await asyncio.sleep(0.3)
    assert len(receiver.pushes) == 2  # acknowledged: never pushed again


async def test_unwrapped_pushes_carry_metadata_in_headers(
    server: ReferenceServer, wire: Wire, receiver: Receiver
) -> None:
    config = pb.PushConfig(
        push_endpoint=receiver.url, no_wrapper=pb.PushConfig.NoWrapper(write_metadata=True)
    )
    topic, sub = await push_subscription(
        wire, receiver.url, push_config=config, enable_message_ordering=True
    )
    await wire.Publish(
        pb.PublishRequest(
            topic=topic,
            messages=[
                pb.PubsubMessage(
                    data=b"\x00raw\xff", attributes={"k": "v", "note": "é"}, ordering_key="o"
                )
            ],
        )
    )
    (push,) = await receiver.wait_for(1)
    assert push.body == b"\x00raw\xff"
    headers = {k.lower(): v for k, v in push.headers.items()}
    assert headers["x-goog-pubsub-subscription-name"] == sub
    assert headers["x-goog-pubsub-ordering-key"] == headers["x-goog-ordering-key"] == "o"
    assert headers["k"] == "v"
    assert headers["note"] == "%C3%A9"  # percent-encoded: not a header character
    assert headers["x-goog-pubsub-message-id"]
    assert headers["x-goog-pubsub-publish-time"].endswith("Z")
    await settled(server, sub)
    # Without write_metadata: the data only.
    plain = pb.PushConfig(push_endpoint=receiver.url, no_wrapper=pb.PushConfig.NoWrapper())
    topic2, _ = await push_subscription(wire, receiver.url, push_config=plain)
    await wire.publish(topic2, b"bare")
    pushes = await receiver.wait_for(2)
    assert pushes[1].body == b"bare"
    assert not any(k.lower().startswith("x-goog-pubsub") for k in pushes[1].headers)


@pytest.mark.slow  # one push must outlive the 10 s ack deadline
async def test_a_receiver_that_fails_hangs_and_recovers(
    server: ReferenceServer, wire: Wire, receiver: Receiver
) -> None:
    """500s, then a hang past the 10 s ack deadline, then 200s: every message arrives,
    the window shrinks on failures and grows back, nothing is lost."""
    phase = {"mode": "fail"}
    hung = asyncio.Event()
    released = asyncio.Event()

    async def answer(push: Push, count: int) -> int:
        if phase["mode"] == "fail":
            return 503
        if phase["mode"] == "hang":
            hung.set()
            # Past the ack deadline: the push times out (released once it did).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), 30)
        return 204

    receiver.answer = answer
    topic, sub = await push_subscription(
        wire,
        receiver.url,
        retry_policy=retry(0.1, 0.2),
    )
    await wire.publish(topic, *[f"m{i}".encode() for i in range(5)])
    await receiver.wait_for(8)  # failures and redeliveries
    failed = server.push.metrics(sub)
    assert failed.failures >= 3
    assert failed.window == 1
    assert failed.statuses[503] >= 3
    phase["mode"] = "hang"
    await asyncio.wait_for(hung.wait(), WAIT)
    started = time.monotonic()
    while server.push.metrics(sub).timeouts == 0:
        assert time.monotonic() - started < 15
        await asyncio.sleep(0.1)
    assert time.monotonic() - started >= 9  # the ack deadline (10 s), not sooner
    phase["mode"] = "ok"
    released.set()
    await settled(server, sub, timeout=20)
    assert set(receiver.data()) == {f"m{i}".encode() for i in range(5)}
    recovered = server.push.metrics(sub)
    assert recovered.successes == 5
    assert recovered.timeouts >= 1
    assert recovered.window > 1


async def test_push_backoff_without_a_retry_policy(
    server: ReferenceServer, wire: Wire, receiver: Receiver
) -> None:
    async def answer(push: Push, count: int) -> int:
        return 500 if count <= 4 else 200

    receiver.answer = answer
    topic, sub = await push_subscription(wire, receiver.url)
    await wire.publish(topic, b"one")
    pushes = await receiver.wait_for(5)
    gaps = [b.at - a.at for a, b in itertools.pairwise(pushes)]
    # 100 ms, 200 ms, 400 ms, 800 ms between the attempts (a little scheduling slack).
    for gap, expected in zip(gaps, (0.1, 0.2, 0.4, 0.8), strict=True):
        assert gap >= expected * 0.9, gaps
    await settled(server, sub)
    assert server.push.metrics(sub).backoff_until == 0.0  # cleared by the success


async def test_dead_letters_after_max_delivery_attempts(
    server: ReferenceServer, wire: Wire, receiver: Receiver
) -> None:
    async def answer(push: Push, count: int) -> int:
        return 400

    receiver.answer = answer
    dead = await wire.topic()
    _, dead_sub = await wire.subscription(dead)
    topic, sub = await push_subscription(
        wire,
        receiver.url,
        dead_letter_policy=pb.DeadLetterPolicy(dead_letter_topic=dead, max_delivery_attempts=5),
        retry_policy=retry(0, 0),
    )
    await wire.publish(topic, b"poison")
    pushes = await receiver.wait_for(5)
    assert [p.json()["deliveryAttempt"] for p in pushes] == [1, 2, 3, 4, 5]
    (forwarded,) = await wire.pull(dead_sub, 1)
    assert forwarded.message.data == b"poison"
    assert forwarded.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    await settled(server, sub)
    await asyncio.sleep(0.3)
    assert len(receiver.pushes) == 5


async def test_ordering_keys_one_in_flight_and_in_order_after_failures(
    server: ReferenceServer, wire: Wire, receiver: Receiver
) -> None:
    in_flight: dict[str, int] = {}
    overlaps: list[str] = []
    failed_once: set[str] = set()

    async def answer(push: Push, count: int) -> int:
        message = push.json()["message"]
        key = message.get("orderingKey", "")
        in_flight[key] = in_flight.get(key, 0) + 1
        if in_flight[key] > 1:
            overlaps.append(key)
        await asyncio.sleep(0.01)
        in_flight[key] -= 1
        data = base64.b64decode(message["data"]).decode()
        if data.endswith("-2") and data not in failed_once:  # each key's third fails once
            failed_once.add(data)
            return 500
        return 200

    receiver.answer = answer
    topic, sub = await push_subscription(
        wire,
        receiver.url,
        enable_message_ordering=True,
        retry_policy=retry(0, 0),
    )
    for key in ("a", "b"):
        await wire.publish(topic, *[f"{key}-{i}".encode() for i in range(6)], ordering_key=key)
    await settled(server, sub, timeout=20)
    assert overlaps == []
    for key in ("a", "b"):
        acked_order: list[str] = []
        for push in receiver.pushes:
            data = base64.b64decode(push.json()["message"]["data"]).decode()
            if data.startswith(key) and data not in acked_order:
                acked_order.append(data)
        assert acked_order == [f"{key}-{i}" for i in range(6)]
        # The failed message was pushed again before anything after it was acked.
        seen = [
            base64.b64decode(p.json()["message"]["data"]).decode()
            for p in receiver.pushes
            if p.json()["message"]["orderingKey"] == key
        ]
        failed_at = seen.index(f"{key}-2")
        assert seen[failed_at + 1] == f"{key}-2"


async def test_exactly_once_is_refused_for_push(wire: Wire, receiver: Receiver) -> None:
    topic = await wire.topic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await push_subscription(wire, receiver.url, topic, enable_exactly_once_delivery=True)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Exactly once delivery is not supported for push" in str(caught.value.details())
    _, sub = await wire.subscription(topic, enable_exactly_once_delivery=True)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await wire.ModifyPushConfig(
            pb.ModifyPushConfigRequest(
                subscription=sub, push_config=pb.PushConfig(push_endpoint=receiver.url)
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, push_sub = await push_subscription(wire, receiver.url, topic)
    update = pb.UpdateSubscriptionRequest(
        subscription=pb.Subscription(name=push_sub, enable_exactly_once_delivery=True),
    )
    update.update_mask.paths.append("enable_exactly_once_delivery")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await wire.UpdateSubscription(update)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for bad in (
        pb.PushConfig(push_endpoint="ftp://example.com/x"),
        pb.PushConfig(push_endpoint="not a url"),
        pb.PushConfig(attributes={"x-goog-version": "v1beta1"}, push_endpoint=receiver.url),
        pb.PushConfig(attributes={"x-goog-version": "v2"}),
        pb.PushConfig(attributes={"other": "x"}, push_endpoint=receiver.url),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await push_subscription(wire, receiver.url, topic, push_config=bad)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_oidc_token_fields_are_stored_and_sent_as_claims(
    server: ReferenceServer, wire: Wire, receiver: Receiver
) -> None:
    config = pb.PushConfig(
        push_endpoint=receiver.url,
        oidc_token=pb.PushConfig.OidcToken(
            service_account_email="pusher@p1.iam.gserviceaccount.com", audience="my-app"
        ),
        attributes={"x-goog-version": "v1"},
    )
    topic, sub = await push_subscription(wire, receiver.url, push_config=config)
    stored = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert stored.push_config == config
    await wire.publish(topic, b"x")
    (push,) = await receiver.wait_for(1)
    scheme, token = push.headers["Authorization"].split(" ")
    assert scheme == "Bearer"
    header, claims, signature = token.split(".")
    decode = lambda part: json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))  # noqa: E731
    assert decode(header)["alg"] == "none"
    assert signature == ""
    body = decode(claims)
    assert body["aud"] == "my-app"
    assert body["email"] == "pusher@p1.iam.gserviceaccount.com"
    assert body["iss"] == "https://accounts.google.com"


async def test_modify_push_config_switches_between_push_and_pull(
    server: ReferenceServer, wire: Wire, receiver: Receiver
) -> None:
    topic, sub = await wire.subscription()
    await wire.publish(topic, b"pulled")
    assert [r.message.data for r in await wire.pull(sub, 1)] == [b"pulled"]
    # pull -> push: the backlog (and what follows) is pushed.
    await wire.publish(topic, b"before-switch")
    await wire.ModifyPushConfig(
        pb.ModifyPushConfigRequest(
            subscription=sub, push_config=pb.PushConfig(push_endpoint=receiver.url)
        )
    )
    stored = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert stored.push_config.push_endpoint == receiver.url
    await wire.publish(topic, b"after-switch")
    await receiver.wait_for(2)
    assert sorted(receiver.data()) == [b"after-switch", b"before-switch"]
    # push -> pull: nothing more is pushed; pull gets it.
    await wire.ModifyPushConfig(pb.ModifyPushConfigRequest(subscription=sub))
    await asyncio.sleep(0.5)
    assert sub not in server.push.pushing()
    await wire.publish(topic, b"pulled-again")
    received = await wire.pull(sub, 1)
    assert received[0].message.data == b"pulled-again"
    assert len(receiver.pushes) == 2
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await wire.ModifyPushConfig(
            pb.ModifyPushConfigRequest(subscription=unique("sub"), push_config=pb.PushConfig())
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_push_subscriptions_resume_after_a_restart(tmp_path: Any, receiver: Receiver) -> None:
    async with run_server(data_dir=tmp_path) as first:
        wire = Wire(first.address)
        try:
            receiver.answer = _always(500)
            topic, sub = await push_subscription(wire, receiver.url)
            await wire.publish(topic, b"kept")
            await receiver.wait_for(1)
            # The endpoint has the push, but the server may not have taken its 500 yet: a
            # stop then ends the push in flight and its lease lapses only at its deadline
            # (10 s). Once the failure is counted the message is back in the subscription.
            deadline = time.monotonic() + WAIT
            while not first.push.metrics(sub).failures:
                assert time.monotonic() < deadline, first.push.metrics(sub)
                await asyncio.sleep(0.01)
        finally:
            await wire.close()
    receiver.answer = None
    async with run_server(data_dir=tmp_path) as second:
        await receiver.wait_for(2 + 0)  # pushed again by the restarted server
        await settled(second, sub)
    assert receiver.data()[-1] == b"kept"


def _always(status: int) -> Callable[[Push, int], Awaitable[int]]:
    async def answer(push: Push, count: int) -> int:
        return status

    return answer
