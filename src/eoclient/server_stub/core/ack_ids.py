"""Ack ids this server issues, and the per-id failures it answers (wire-contract §2.4).

An ack id is ``{subscription uid}-{seq}-{generation}``: a new generation per delivery, so
only the latest delivery's id resolves to the message; the uid differs for every
subscription ever created, every seek and every restart, so an id from another
subscription, from before a seek or from before a restart never resolves.
"""

from __future__ import annotations

import random
from typing import NamedTuple


def new_uid(rng: random.Random) -> str:
    """A fresh subscription uid for the ack ids issued from now on: after a new
    subscription, a seek, a detach or a restart (48 random bits, so an earlier uid comes
    back with a chance of about one in 2**48)."""
    return f"{rng.getrandbits(48):012x}"


# ErrorInfo metadata values of the exactly-once per-id failures (wire-contract §2.2).
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


def parse_ack_id(ack_id: str) -> AckIdParts | None:
    """The parts of an id this server issued, or None for anything else."""
    parts = ack_id.split("-")
    if len(parts) != 3:
        return None
    uid, seq, generation = parts
    for number in (seq, generation):
        if not (
            0 < len(number) <= MAX_ACK_ID_NUMBER_DIGITS and number.isascii() and number.isdigit()
        ):
            return None
    return AckIdParts(uid, int(seq), int(generation))
