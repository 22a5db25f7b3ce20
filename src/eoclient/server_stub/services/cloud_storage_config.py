"""``cloud_storage_config`` as CreateSubscription and UpdateSubscription bring it: refused
with INVALID_ARGUMENT, before anything is stored, when it breaks the specification's rules
(docs/protocol.md#cloud-storage-subscription-settings); ``exports/`` delivers the ones it
accepts.

The limits: ``bucket`` required and a valid bucket name; ``filename_prefix`` and
``filename_suffix`` follow the object-name rules, the suffix not ending in ``/``;
``filename_datetime_format`` follows the date-time grammar (``exports/naming.py``);
``max_duration`` 1 to 10 minutes (unset: 5), ``max_bytes`` 1 KB to 10 GiB, ``max_messages``
at least 1,000 (unset, 0: no such limit). Texts follow the shape the server uses for every
range ("The value for … is out of bounds. You passed … in the request, but …").
"""

from __future__ import annotations

from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument
from eoclient.server_stub.buckets.model import InvalidName, check_bucket_name
from eoclient.server_stub.exports.naming import DatetimeFormatError, parse_datetime_format
from eoclient.server_stub.exports.settings import (
    MAX_BYTES,
    MAX_DURATION_SECONDS,
    MIN_BYTES,
    MIN_DURATION_SECONDS,
    MIN_MESSAGES,
)

# An object name is at most 1024 bytes; the date-time and the uuid take at most this many.
_GENERATED_NAME_BYTES = 64
MAX_NAME_PART_BYTES = 1024 - _GENERATED_NAME_BYTES


def _seconds(duration: str | float) -> str:
    value = float(duration)
    return f"{value:g}s"


def check_cloud_storage_config(config: pubsub_pb2.CloudStorageConfig) -> None:
    """INVALID_ARGUMENT unless ``config`` keeps every rule."""
    if not config.bucket:
        raise InvalidArgument(
            "cloud_storage_config.bucket is required: the name of an existing bucket, "
            "without gs://."
        )
    try:
        check_bucket_name(config.bucket)
    except InvalidName as error:
        raise InvalidArgument(f"Invalid cloud_storage_config.bucket: {error}.") from None
    for field, value in (
        ("filename_prefix", config.filename_prefix),
        ("filename_suffix", config.filename_suffix),
    ):
        if any(c in value for c in "\r\n\0"):
            raise InvalidArgument(
                f"The value for {field} is invalid: an object name cannot hold a carriage "
                f"return, a line feed or NUL (you passed {value!r})."
            )
    if len((config.filename_prefix + config.filename_suffix).encode()) > MAX_NAME_PART_BYTES:
        raise InvalidArgument(
            f"The values for filename_prefix and filename_suffix are too long: together "
            f"they may take {MAX_NAME_PART_BYTES} bytes of the 1024 of an object name."
        )
    if config.filename_suffix.endswith("/"):
        raise InvalidArgument(
            f'The value for filename_suffix is invalid: it must not end in "/" (you passed '
            f"{config.filename_suffix!r})."
        )
    try:
        parse_datetime_format(config.filename_datetime_format)
    except DatetimeFormatError as error:
        raise InvalidArgument(
            "The value for filename_datetime_format is invalid "
            f"({config.filename_datetime_format!r}): {error}."
        ) from None
    if config.HasField("max_duration"):
        duration = config.max_duration
        seconds = duration.seconds + duration.nanos / 1e9
        if seconds and not MIN_DURATION_SECONDS <= seconds <= MAX_DURATION_SECONDS:
            raise InvalidArgument(
                f"The value for max_duration is out of bounds. You passed {_seconds(seconds)} "
                f"in the request, but the value must be between {_seconds(MIN_DURATION_SECONDS)} "
                f"and {_seconds(MAX_DURATION_SECONDS)}."
            )
    if config.max_bytes and not MIN_BYTES <= config.max_bytes <= MAX_BYTES:
        raise InvalidArgument(
            f"The value for max_bytes is out of bounds. You passed {config.max_bytes} in the "
            f"request, but the value must be between {MIN_BYTES} and {MAX_BYTES}."
        )
    if config.max_messages and config.max_messages < MIN_MESSAGES:
        raise InvalidArgument(
            f"The value for max_messages is too small. You passed {config.max_messages} in "
            f"the request, but the value must be at least {MIN_MESSAGES}."
        )
