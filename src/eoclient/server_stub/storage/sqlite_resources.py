"""``SqliteStore``'s resource tables: topics, subscriptions and documents.

A subscription row keeps its config, its clocks and its ack-id uid; the activity clock
changes on nearly every call, so it is written lazily, once per commit
(``flush_touched``). ``source_topic`` remembers the topic each subscription was created
on (kept when the topic is deleted): its messages are the only ones the subscription's
rows can name, which garbage collection relies on.
"""

from __future__ import annotations

from eoclient.server_stub.core.model import TopicConfig
from eoclient.server_stub.core.store import SubscriptionRecord
from eoclient.server_stub.storage import codec
from eoclient.server_stub.storage.sqlite_writes import Names, Writes

_PUT_TOPIC = "INSERT OR REPLACE INTO topics (id, config) VALUES (?, ?)"
_DELETE_TOPIC = "DELETE FROM topics WHERE id = ?"
_PUT_SUBSCRIPTION = (
    "INSERT OR REPLACE INTO subscriptions (id, topic, config, created, last_activity, uid) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_TOUCH_SUBSCRIPTION = "UPDATE subscriptions SET last_activity = ? WHERE id = ?"
_SET_UID = "UPDATE subscriptions SET uid = ? WHERE id = ?"
_DELETE_SUBSCRIPTION = "DELETE FROM subscriptions WHERE id = ?"
_PUT_DOCUMENT = "INSERT OR REPLACE INTO documents (kind, name, body) VALUES (?, ?, ?)"
_DELETE_DOCUMENT = "DELETE FROM documents WHERE kind = ? AND name = ?"


class ResourceTables:
    def __init__(self, writes: Writes, names: Names) -> None:
        self._writes = writes
        self._names = names
        self._touched: dict[int, float] = {}
        self.source_topic: dict[int, int] = {}  # subscription id -> topic id

    # ---------------------------------------------------------------- reading (at open)

    def topics(self) -> list[TopicConfig]:
        rows = self._writes.db.execute("SELECT config FROM topics ORDER BY id")
        return [codec.topic_from_json(config) for (config,) in rows]

    def subscriptions(self) -> list[tuple[int, SubscriptionRecord]]:
        """(id, record) of every subscription, in creation order."""
        records = []
        for id_, topic, config, created, last_activity, uid in self._writes.db.execute(
            "SELECT id, topic, config, created, last_activity, uid FROM subscriptions ORDER BY id"
        ):
            self.source_topic[id_] = topic
            config = codec.subscription_from_json(config)
            records.append((id_, SubscriptionRecord(config, created, last_activity, uid)))
        return records

    def documents(self) -> dict[tuple[str, str], bytes]:
        rows = self._writes.db.execute("SELECT kind, name, body FROM documents")
        return {(kind, name): bytes(body) for kind, name, body in rows}

    # ---------------------------------------------------------------- changes

    def put_topic(self, config: TopicConfig) -> None:
        id_ = self._names.id("topic", config.name)
        self._writes.write(_PUT_TOPIC, (id_, codec.topic_to_json(config)))

    def delete_topic(self, name: str) -> None:
        self._writes.write(_DELETE_TOPIC, (self._names.id("topic", name),))

    def put_subscription(self, record: SubscriptionRecord) -> None:
        id_ = self._names.id("subscription", record.config.name)
        source = self.source_topic.get(id_)
        if source is None:  # created now: on the topic it names
            source = self.source_topic[id_] = self._names.id("topic", record.config.topic)
        self._touched.pop(id_, None)
        config = codec.subscription_to_json(record.config)
        row = (id_, source, config, record.created, record.last_activity, record.uid)
        self._writes.write(_PUT_SUBSCRIPTION, row)

    def touch_subscription(self, name: str, last_activity: float) -> None:
        self._touched[self._names.id("subscription", name)] = last_activity

    def set_uid(self, subscription: int, uid: str) -> None:
        self._writes.write(_SET_UID, (uid, subscription))

    def delete_subscription(self, subscription: int) -> None:
        self._touched.pop(subscription, None)
        self.source_topic.pop(subscription, None)
        self._writes.write(_DELETE_SUBSCRIPTION, (subscription,))

    def put_document(self, kind: str, name: str, body: bytes) -> None:
        self._writes.write(_PUT_DOCUMENT, (kind, name, body))

    def delete_document(self, kind: str, name: str) -> None:
        self._writes.write(_DELETE_DOCUMENT, (kind, name))

    def flush_touched(self) -> bool:
        """Buffer the activity clocks changed since the last commit; True if any were."""
        if not self._touched:
            return False
        rows = [(last_activity, id_) for id_, last_activity in self._touched.items()]
        self._writes.write_many(_TOUCH_SUBSCRIPTION, rows)
        self._touched.clear()
        return True

    @property
    def dirty(self) -> bool:
        return bool(self._touched)
