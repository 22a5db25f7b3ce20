"""Rows ``SqliteStore`` reads back, as the core's objects: a message from the columns of
``messages``, a ``BacklogRow`` from a row of the backlog joined with its message."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from eoclient.server_stub.core import policies
from eoclient.server_stub.core.model import StoredMessage
from eoclient.server_stub.core.store import BacklogRow
from eoclient.server_stub.storage import codec

# The columns a message is read back from (``message_from_row``), of ``messages m``.
MESSAGE_COLUMNS = "m.message_id, m.data, m.attributes, m.ordering_key, m.publish_time, m.size"


# StoredMessage is frozen: its ``__init__`` sets each field through
# ``object.__setattr__``. A refill reads a window of rows (10,000) at once, so the rows
# read back build their messages through the slots' own descriptors instead, which costs
# half as much (0.6 against 1.1-1.4 µs a row with its BacklogRow, measured). A field
# added to StoredMessage is one ``message_from_row`` must set: ``test_sqlite_rows.py``
# compares what it builds with the dataclass's own constructor, field by field.
_new = object.__new__


def _setter(name: str) -> Callable[[StoredMessage, Any], None]:
    setter: Callable[[StoredMessage, Any], None] = getattr(StoredMessage, name).__set__
    return setter


_set_message_id = _setter("message_id")
_set_data = _setter("data")
_set_attributes = _setter("attributes")
_set_ordering_key = _setter("ordering_key")
_set_publish_time = _setter("publish_time")
_set_size = _setter("size")
_set_deliver_at = _setter("deliver_at")


def message_from_row(row: Sequence[Any]) -> StoredMessage:
    """A message from the ``MESSAGE_COLUMNS`` of a row."""
    return _message(*row)


def _message(
    message_id: str,
    data: bytes,
    attributes_json: str | None,
    ordering_key: str,
    publish_time: float,
    size: int,
) -> StoredMessage:
    if attributes_json:
        attributes = codec.attributes_from_json(attributes_json)
        # Checked when it was published: it parses.
        deliver_at = policies.deliver_at(attributes, publish_time)
    else:
        attributes, deliver_at = {}, 0.0
    message = _new(StoredMessage)
    _set_message_id(message, message_id)
    _set_data(message, data)
    _set_attributes(message, attributes)
    _set_ordering_key(message, ordering_key)
    _set_publish_time(message, publish_time)
    _set_size(message, size)
    _set_deliver_at(message, deliver_at)
    return message


def backlog_rows(rows: Iterable[tuple[Any, ...]]) -> list[BacklogRow]:
    """BacklogRows from rows of seq, failed attempts, generation and ``MESSAGE_COLUMNS``
    (unpacked whole: no slice of each)."""
    return [
        BacklogRow(seq, _message(message_id, data, attributes, key, published, size), failed, gen)
        for seq, failed, gen, message_id, data, attributes, key, published, size in rows
    ]
