"""Messages in: Publish and its fan-out, backlog quotas, dead letters, skip by id.

A Publish is validated whole first (delay attributes included: nothing is stored if one
message is bad), then the topic's backlog quota is applied (evict, refuse, or hold: the
hold's wait is the service's, ``services/publish_hold.py``), then every message is
stored once and handed to each subscription of the topic whose filter it matches.
Filters are applied here: a message that does not match is settled at once on that
subscription, never delivered and never dead-lettered. Message ids are the store's
sequence numbers (``last_seq``), which skip-by-id and snapshots rely on.

Dead letters are forwarded after max_delivery_attempts (``delivery`` decides when) with
a new message id and the real service's CloudPubSubDeadLetter* attributes.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence

from eoclient._clock import Clock
from eoclient.errors import ResourceExhausted
from eoclient.server_stub.core import names, policies, validation
from eoclient.server_stub.core.ack_ids import MAX_ACK_ID_NUMBER_DIGITS
from eoclient.server_stub.core.delivery import Forwarder
from eoclient.server_stub.core.history import History
from eoclient.server_stub.core.model import DELETED_TOPIC, NewMessage, StoredMessage
from eoclient.server_stub.core.policies import BacklogQuotaHeld, QuotaAction, SkipOutcome
from eoclient.server_stub.core.resources import Resources, TopicState
from eoclient.server_stub.core.seq_topics import SeqTopics
from eoclient.server_stub.core.store import SeqMessage, Store

# Attributes the real service adds to a dead-lettered message (docs/protocol.md#dead-letters,
# confirmed by the emulator's output).
DEAD_LETTER_DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
DEAD_LETTER_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
DEAD_LETTER_SUBSCRIPTION_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
DEAD_LETTER_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"


class Publishing:
    """Publish fan-out, dead letters and skips over the subscriptions of ``resources``."""

    def __init__(
        self,
        clock: Clock,
        store: Store,
        resources: Resources,
        history: History,
        changed: Callable[[str], None],
    ) -> None:
        self._clock = clock
        self._store = store
        self._resources = resources
        self._history = history
        self._changed = changed
        self.last_seq = 0  # message ids are the seqs: one counter for both
        self.seq_topics = SeqTopics()  # which topic a seq went to (skip tells them apart)

    def restored(self, last_seq: int) -> None:
        """The store's state was loaded: numbering goes on after ``last_seq``; the topics
        of seqs before it are not known (the index is not stored)."""
        self.last_seq = last_seq
        self.seq_topics = SeqTopics(indexed_from=last_seq + 1)

    # ================================================================ publish

    def publish(
        self, topic_name: str, messages: Sequence[NewMessage], request_bytes: int = 0
    ) -> list[str]:
        """Validate (delay attributes included: nothing is stored if one is bad), apply
        the topic's backlog quota, then store and fan out."""
        topic = self._resources.topic(topic_name)
        validation.publish(messages, request_bytes)
        now = self._clock.now()
        for new in messages:
            if new.attributes:
                policies.deliver_at(new.attributes, now)
        self._apply_backlog_quota(topic, now)
        ids = self._publish_to(topic, messages, now)
        counters = topic.counters
        counters.publish_requests += 1
        counters.published_messages += len(messages)
        counters.published_bytes += request_bytes or sum(message_size(m) for m in messages)
        return ids

    def reserve_ids(self, count: int) -> list[str]:
        """``count`` message ids no message will have: a message a topic's transform
        filtered out still gets an id in the Publish response (one per message sent),
        and it must not name a stored message. Nothing is stored for them (after a
        restart the counter resumes from the last stored message)."""
        first = self.last_seq + 1
        self.last_seq += count
        return [str(seq) for seq in range(first, first + count)]

    def _apply_backlog_quota(self, topic: TopicState, now: float) -> None:
        """A subscription over the topic's quota: evict, refuse or hold (policies.py)."""
        quota = topic.config.policies.backlog_quota
        if quota is None:
            return
        over = [
            subscription
            for subscription in (
                self._resources.subscriptions[n] for n in sorted(topic.subscriptions)
            )
            if not subscription.config.internal
            and subscription.delivery.over_quota(now, quota.limit_bytes, quota.limit_age)
        ]
        if not over:
            return
        if quota.action is QuotaAction.EVICTION:
            for subscription in over:
                if subscription.delivery.evict(now, quota.limit_bytes, quota.limit_age):
                    self._changed(subscription.config.name)
            return
        laggard = over[0].delivery.reads
        limits = []
        if quota.limit_bytes is not None:
            limits.append(f"{laggard.backlog_bytes()} of {quota.limit_bytes} bytes")
        if quota.limit_age is not None:
            oldest = laggard.oldest_unacked()
            age = now - oldest if oldest is not None else 0.0
            limits.append(f"oldest message {age:.0f} s old, limit {quota.limit_age:g} s")
        text = (
            f"Backlog quota exceeded on topic {topic.config.name} "
            f"({quota.action.value}): subscription {over[0].config.name} holds "
            f"{'; '.join(limits)}. Consume or acknowledge messages, or change the quota."
        )
        if quota.action is QuotaAction.EXCEPTION:
            topic.counters.refused_publishes += 1
            raise ResourceExhausted(text)
        raise BacklogQuotaHeld(text, quota.hold_timeout)

    def note_held(self, topic_name: str, *, admitted: bool) -> None:
        """The door held a Publish on a HOLD quota; ``admitted``: space freed in time."""
        topic = self._resources.topics.get(topic_name)
        if topic is not None:
            topic.counters.held_publishes += 1
            if not admitted:
                topic.counters.held_then_refused += 1

    def _publish_to(
        self, topic: TopicState, messages: Sequence[NewMessage], now: float
    ) -> list[str]:
        """Store ``messages`` on every subscription of ``topic`` whose filter they match
        (and its retention cursor, if it has one)."""
        subscriptions = [self._resources.subscriptions[n] for n in sorted(topic.subscriptions)]
        stored: list[SeqMessage] = []
        receivers: dict[str, list[int]] = {s.config.name: [] for s in subscriptions}
        self.seq_topics.record(self.last_seq + 1, self.last_seq + len(messages), topic.config.name)
        for new in messages:
            seq = self.last_seq = self.last_seq + 1
            attributes = dict(new.attributes)
            message = StoredMessage(
                message_id=str(seq),
                data=new.data,
                attributes=attributes,
                ordering_key=new.ordering_key,
                publish_time=now,
                size=message_size(new),
                deliver_at=policies.deliver_at(attributes, now) if attributes else 0.0,
            )
            stored.append((seq, message))
            for subscription in subscriptions:
                if subscription.filter is not None and not subscription.filter.matches(
                    message.attributes
                ):
                    # "Pub/Sub automatically acknowledges the messages that don't match
                    # the filter" (filter page): never delivered, never dead-lettered.
                    subscription.delivery.filtered()
                    continue
                receivers[subscription.config.name].append(seq)
        # The store first: a subscription's window may leave a message cold (the store's).
        self._store.publish(topic.config.name, stored, receivers)
        by_seq = dict(stored)
        for subscription in subscriptions:
            seqs = receivers[subscription.config.name]
            for seq in seqs:
                subscription.delivery.add(seq, by_seq[seq], now, now)
            if subscription.config.internal:  # the retention cursor's size limit
                retention = topic.config.policies.retention
                if retention is not None and retention.enabled:
                    subscription.delivery.trim(
                        now,
                        retention.size_limit,
                        keep_since=Resources.cursor_keep_since(topic.config, now),
                    )
            elif seqs:
                self._changed(subscription.config.name)
        return [message.message_id for _, message in stored]

    # ========================================================== skip by id

    def skip(self, name: str, message_ids: Sequence[str]) -> dict[str, SkipOutcome]:
        """Acknowledge chosen messages on a subscription as a subscriber would (PIP-423).

        Message ids are the seqs this server numbered; an id it never issued, or issued
        for another topic, is NOT_FOUND; one of the subscription's topic not pending on the
        subscription ALREADY_ACKNOWLEDGED. Where ``seq_topics`` cannot say (an id from
        before this process started), an id not pending is ALREADY_ACKNOWLEDGED.
        """
        subscription = self._resources.subscription(name)
        topic = subscription.config.topic
        now = self._clock.now()
        subscription.delivery.advance(now)
        outcomes: dict[str, SkipOutcome] = {}
        for message_id in dict.fromkeys(message_ids):  # an id twice: skipped once
            seq = _seq_of(message_id)
            if seq is None or not 1 <= seq <= self.last_seq:
                outcomes[message_id] = SkipOutcome.NOT_FOUND
            elif subscription.delivery.skip(seq):
                outcomes[message_id] = SkipOutcome.SKIPPED
            elif self._elsewhere(seq, topic):
                outcomes[message_id] = SkipOutcome.NOT_FOUND
            else:
                outcomes[message_id] = SkipOutcome.ALREADY_ACKNOWLEDGED
        if SkipOutcome.SKIPPED in outcomes.values():
            self._changed(name)  # a skipped head unblocks its ordering key
        return outcomes

    def _elsewhere(self, seq: int, topic: str) -> bool:
        """Whether ``seq`` is known to have gone to a topic other than ``topic`` (a
        deleted topic's subscriptions no longer know theirs)."""
        published_to = self.seq_topics.topic_of(seq)
        return topic != DELETED_TOPIC and published_to is not None and published_to != topic

    # ========================================================== dead letters

    def forwarder(self, subscription_name: str) -> Forwarder:
        def forward(message: StoredMessage, delivery_count: int) -> bool:
            return self._forward_dead_letter(subscription_name, message, delivery_count)

        return forward

    def _forward_dead_letter(self, name: str, message: StoredMessage, delivery_count: int) -> bool:
        """Publish ``message`` to the subscription's dead-letter topic, as the service does.

        A new message (new id, new publish time) with the same data, attributes and
        ordering key plus the four CloudPubSubDeadLetter* attributes
        (docs/protocol.md#dead-letters).
        Returns False, and the source keeps redelivering the message, when there is no
        dead-letter topic to publish to: it was deleted after the policy was set (the
        real service cannot forward either then, and dead lettering is "best effort" per
        the DeadLetterPolicy proto comment; the message is not lost).
        """
        subscription = self._resources.subscriptions.get(name)
        policy = subscription.config.dead_letter_policy if subscription else None
        topic = self._resources.topics.get(policy.dead_letter_topic) if policy else None
        if topic is None:
            return False
        now = self._clock.now()
        attributes = dict(message.attributes)
        attributes[DEAD_LETTER_DELIVERY_COUNT] = str(delivery_count)
        attributes[DEAD_LETTER_SUBSCRIPTION] = names.short_id(name)
        attributes[DEAD_LETTER_SUBSCRIPTION_PROJECT] = names.project_of(name)
        attributes[DEAD_LETTER_PUBLISH_TIME] = rfc3339_millis(message.publish_time)
        forwarded = NewMessage(message.data, attributes, message.ordering_key)
        [new_id] = self._publish_to(topic, [forwarded], now)
        self._history.forwarded(
            name, message.message_id, now, topic.config.name, new_id, delivery_count
        )
        return True


def _seq_of(message_id: str) -> int | None:
    """The seq a message id of this server names (they are the same number)."""
    if not (0 < len(message_id) <= MAX_ACK_ID_NUMBER_DIGITS and message_id.isascii()):
        return None
    return int(message_id) if message_id.isdigit() else None


def rfc3339_millis(seconds: float) -> str:
    """``2026-11-22T03:06:25.555Z``: the form of CloudPubSubDeadLetterSourceTopicPublishTime."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def message_size(message: NewMessage) -> int:
    """Bytes counted for flow control: data + attribute keys and values + ordering key."""
    return (
        len(message.data)
        + sum(len(k.encode()) + len(v.encode()) for k, v in message.attributes.items())
        + len(message.ordering_key.encode())
    )
