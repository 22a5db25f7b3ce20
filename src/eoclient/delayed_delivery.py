"""Delayed delivery: publish a message now, have it delivered later (eoclient's server).

A message carrying one of two attributes is held back on every subscription of its topic
until its time (docs/protocol.md#delayed-delivery; the rule is the broker's,
``server_stub/core/policies.py``)::

    eoclient-deliver-at     an RFC 3339 time with a zone, "2026-11-23T18:00:00Z"
    eoclient-deliver-after  a duration in protobuf JSON form, "90s", "1.5s"

::

    from eoclient.delayed_delivery import deliver_after

    await publisher.publish(topic, b"reminder", **deliver_after(timedelta(minutes=5)))

The attributes are plain Pub/Sub attributes, so any client can set them (the official
``google-cloud-pubsub`` publisher included). A malformed value, both attributes at once,
or a delay beyond 31 days is refused at Publish with INVALID_ARGUMENT naming the
attribute. Ordering keys keep their order (a key's later messages wait behind a delayed
one); skipping the message by id cancels it. Google's emulator and the real service
ignore the attributes and deliver at once.
"""

from __future__ import annotations

import datetime

__all__ = ["DELIVER_AFTER_ATTRIBUTE", "DELIVER_AT_ATTRIBUTE", "deliver_after", "deliver_at"]

# The same names as the broker's (server_stub/core/policies.py); a test keeps them equal.
DELIVER_AT_ATTRIBUTE = "eoclient-deliver-at"
DELIVER_AFTER_ATTRIBUTE = "eoclient-deliver-after"

_MICROSECOND = datetime.timedelta(microseconds=1)


def deliver_at(when: datetime.datetime) -> dict[str, str]:
    """The attribute that holds a message back until ``when`` (timezone-aware)."""
    if not isinstance(when, datetime.datetime):
        raise TypeError(f"deliver_at() takes a datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(
            f"deliver_at() needs a timezone-aware datetime (e.g. datetime.now(timezone.utc) "
            f"+ ...); got the naive {when!r}"
        )
    text = when.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    return {DELIVER_AT_ATTRIBUTE: text}


def deliver_after(delay: datetime.timedelta) -> dict[str, str]:
    """The attribute that holds a message back for ``delay`` after its publish time."""
    if not isinstance(delay, datetime.timedelta):
        raise TypeError(f"deliver_after() takes a timedelta, got {type(delay).__name__}")
    if delay < datetime.timedelta(0):
        raise ValueError(f"deliver_after() needs a delay >= 0, got {delay!r}")
    seconds, micros = divmod(delay // _MICROSECOND, 1_000_000)
    text = f"{seconds}.{micros:06d}".rstrip("0") if micros else str(seconds)
    return {DELIVER_AFTER_ATTRIBUTE: f"{text}s"}
