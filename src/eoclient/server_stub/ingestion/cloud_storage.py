"""One topic's ingestion from a Cloud Storage bucket: which objects, in what order, when
to look again, and the state it shows. Pure and synchronous: the shell (``shell.py``)
lists and reads the bucket and publishes, and tells this object what happened, passing
``now`` (docs/architecture.md#pure-cores-take-now-and-never-await).

The rules (docs/protocol.md#cloud-storage-ingestion):

* an object is taken when its name matches ``match_glob`` (all do when it is unset), its
  creation time is at or after ``minimum_object_create_time`` (when set), and it was not
  ingested before — objects there when the topic was created and objects added later
  alike;
* an object is named by (bucket, name, generation): one overwritten in place is a new
  object (a new generation) and is ingested again; one ingested is never ingested again
  by the same topic, across restarts too (``ledger.py`` remembers);
* objects go in order of creation time (then name), at most ``MAX_OBJECTS_PER_POLL`` per
  look, so one poll never holds the shell for a whole bucket;
* the state: ``BUCKET_NOT_FOUND`` while the bucket does not exist, ``ACTIVE`` once it is
  listed. An object that cannot be parsed does not change the state (the service reports
  it as an ``IngestionFailureEvent`` in the platform logs and goes on with the next
  object).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from eoclient.server_stub.ingestion.sources import ACTIVE, CloudStorageSource
from eoclient.server_stub.services.cloud_storage_glob import matches

BUCKET_NOT_FOUND = "BUCKET_NOT_FOUND"
# How often a bucket is listed for new objects. The service notices new objects "soon"
# (it documents no interval); a second keeps a test or a demo waiting little and costs
# one listing a second per import topic.
DEFAULT_POLL_INTERVAL = 1.0
# Objects read per look: a bucket of many objects is worked through over several looks,
# each one short, so a change of settings or a stop is noticed between them.
MAX_OBJECTS_PER_POLL = 100

ObjectKey = tuple[str, str, int]  # (bucket, name, generation)


@dataclass(frozen=True)
class ListedObject:
    """An object as a listing shows it."""

    name: str
    generation: int
    created: float  # seconds since the epoch
    size: int = 0

    def key(self, bucket: str) -> ObjectKey:
        return (bucket, self.name, self.generation)


@dataclass
class IngestionCounters:
    """What one topic ingested since the server started (the metrics and the dashboard)."""

    objects: int = 0
    messages: int = 0
    bytes: int = 0
    # reason -> count: "avro" (an object that is not of its format), "api_violation" (a
    # message over the limits), "schema_violation" (refused by the topic's schema),
    # "publish" (any other refusal of a Publish).
    failures: Counter[str] = field(default_factory=Counter)
    last_object: str = ""
    last_ingest_time: float | None = None


class CloudStorageIngestion:
    """The ingestion of one topic from ``source.bucket``."""

    def __init__(
        self,
        topic: str,
        source: CloudStorageSource,
        now: float,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        self.topic = topic
        self.source = source
        self.poll_interval = poll_interval
        self.state = ACTIVE  # until a look says otherwise: the service starts there too
        self.next_poll = now  # due at once
        self.counters = IngestionCounters()

    def due(self, now: float) -> bool:
        return now >= self.next_poll

    def wake(self, now: float) -> None:
        """Look again at once (new settings, or a test that does not want to wait)."""
        self.next_poll = min(self.next_poll, now)

    def bucket_missing(self, now: float) -> bool:
        """The bucket does not exist; True when that is news (the state changed)."""
        changed = self.state != BUCKET_NOT_FOUND
        self.state = BUCKET_NOT_FOUND
        self.next_poll = now + self.poll_interval
        return changed

    def select(
        self, listed: Iterable[ListedObject], done: Container[ObjectKey], now: float
    ) -> tuple[list[ListedObject], bool]:
        """The bucket was listed: the objects to ingest now, in order, and whether the
        state changed. More may remain (``MAX_OBJECTS_PER_POLL``): the next look is then
        due at once."""
        changed = self.state != ACTIVE
        self.state = ACTIVE
        source = self.source
        minimum = source.minimum_object_create_time
        wanted = sorted(
            (
                o
                for o in listed
                if matches(source.match_glob, o.name)
                and (minimum is None or o.created >= minimum)
                and o.key(source.bucket) not in done
            ),
            key=lambda o: (o.created, o.name, o.generation),
        )
        batch = wanted[:MAX_OBJECTS_PER_POLL]
        self.next_poll = now if len(wanted) > len(batch) else now + self.poll_interval
        return batch, changed

    def ingested(self, listed: ListedObject, messages: int, size: int, now: float) -> None:
        counters = self.counters
        counters.objects += 1
        counters.messages += messages
        counters.bytes += size
        counters.last_object = listed.name
        counters.last_ingest_time = now

    def failed(self, reason: str, count: int = 1) -> None:
        self.counters.failures[reason] += count


def listing_prefix(match_glob: str) -> str:
    """The literal start of ``match_glob`` (before its first wildcard): listing only names
    that begin with it misses no match and saves listing the whole bucket."""
    for index, char in enumerate(match_glob):
        if char in "*?[{\\":
            return match_glob[:index]
    return match_glob
