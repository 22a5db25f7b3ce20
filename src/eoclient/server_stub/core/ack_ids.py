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

import random
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
