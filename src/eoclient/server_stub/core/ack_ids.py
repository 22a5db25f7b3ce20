"""Ack ids this server issues, and the per-id failures it answers
(docs/protocol.md#ack-ids-and-generations).

An ack id is ``{subscription uid}-{seq}-{generation}``: a new generation per delivery, so
only the latest delivery's id resolves to the message; the uid differs for every
subscription ever created and every seek, so an id from another subscription or from
before a seek never resolves. A durable store keeps the uid (and each lease) across
restarts, so an id from before a restart resolves as it did; the in-memory server draws
a new uid at every start.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from typing import NamedTuple


def new_uid(rng: random.Random) -> str:
    """A fresh subscription uid for the ack ids issued from now on: after a new
    subscription, a seek, a detach, or a start without a stored uid (48 random bits, so
    an earlier uid comes back with a chance of about one in 2**48)."""
    return f"{rng.getrandbits(48):012x}"


# ErrorInfo metadata values of the exactly-once per-id failures
# (docs/protocol.md#exactly-once-error-details).
PERMANENT_FAILURE_INVALID_ACK_ID = "PERMANENT_FAILURE_INVALID_ACK_ID"
TRANSIENT_FAILURE_UNORDERED_ACK_ID = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"


class AckIdParts(NamedTuple):
    # A NamedTuple, not a frozen dataclass: ack ids are parsed on every ack and
    # modack, and a tuple is several times cheaper to build.
    uid: str
    seq: int
    generation: int


# Seqs and generations are counters: 19 digits (2**63) is more than any server reaches.
# The bound keeps int() of an absurdly long id from costing time, and ASCII-only digits
# keep str.isdigit()'s other digits ("²") out of int(), which refuses them.
MAX_ACK_ID_NUMBER_DIGITS = 19
_new_tuple = tuple.__new__


def parse_ack_id(ack_id: str) -> AckIdParts | None:
    """The parts of an id this server issued, or None for anything else."""
    # Written out, not a loop over the two numbers: every id of every ack is parsed.
    parts = ack_id.split("-")
    if len(parts) != 3:
        return None
    uid, seq, generation = parts
    if (
        seq.isdigit()  # False when empty
        and generation.isdigit()
        and seq.isascii()
        and generation.isascii()
        and len(seq) <= MAX_ACK_ID_NUMBER_DIGITS
        and len(generation) <= MAX_ACK_ID_NUMBER_DIGITS
    ):
        # tuple.__new__ directly: a NamedTuple's own constructor is a Python function
        # around the same call, as much again for every id.
        return _new_tuple(AckIdParts, (uid, int(seq), int(generation)))
    return None


# Between the ids of a request joined for ``parse_ack_ids``: never in an id this server
# issues (uid, digits and dashes), so an id holding it cannot pass for two.
_SEPARATOR = "\n"


@functools.lru_cache(maxsize=64)
def _issued_pattern(uid: str) -> re.Pattern[str]:
    """For ``parse_ack_ids``: a request's ids, each after a separator, all issued under
    ``uid`` (compiled once a uid: the cache holds the recent ones)."""
    number = f"[0-9]{{1,{MAX_ACK_ID_NUMBER_DIGITS}}}"
    return re.compile(f"(?:{_SEPARATOR}{re.escape(uid)}-{number}-{number})*")


def parse_ack_ids(uid: str, ack_ids: Sequence[str]) -> tuple[list[int], list[int]] | None:
    """The seqs and generations of ``ack_ids`` when every one is an id issued under
    ``uid`` — what ``parse_ack_id`` answers for each, with that uid — parsed in a few
    C-level passes over the ids joined, not a Python call an id (about a sixth of the
    time); None when any is not (then parse them one by one: they have other answers).

    The joined text (a separator before each id) is matched whole, each id
    ``{uid}-{digits}-{digits}`` with the digits ASCII and as long as ``parse_ack_id`` takes
    them; then each separator-and-prefix becomes a dash (a separator is only ever at an
    id's start, so nothing else is replaced) and the numbers are what lies between the
    dashes. An id holding the separator would make more than one piece: the count tells.
    """
    if not ack_ids or "-" in uid or _SEPARATOR in uid:
        return None  # a uid parse_ack_id cannot split off (never one new_uid draws)
    joined = _SEPARATOR + _SEPARATOR.join(ack_ids)
    if _issued_pattern(uid).fullmatch(joined) is None:
        return None
    numbers = joined.replace(f"{_SEPARATOR}{uid}-", "-").split("-")
    if len(numbers) != 2 * len(ack_ids) + 1:  # the first is the empty text before a dash
        return None
    return list(map(int, numbers[1::2])), list(map(int, numbers[2::2]))
