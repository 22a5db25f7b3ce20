"""The cyclic garbage collector's setting in the ``eoclient serve`` process.

The reference server keeps every message it holds as Python objects, so its heap grows
with each Publish, by several container objects a message. CPython's collector
(generations 0, 1, 2; thresholds 700, 10, 10) looks at generation 2 every 10 x 10 x 700 =
70,000 net new container objects and walks the whole heap whenever what survived into it
has grown by a quarter since the last full walk: filling a backlog of 200,000 messages
made 10 full walks of an ever larger heap, 1.4-1.6 s of the ~2.3 s of server CPU those
Publish calls took. A durable server (``--data-dir``) meets the same while it delivers: its
window of messages is refilled from the store 10,000 rows at a time, the rows live until
they are acknowledged, and every refill's survivors count towards the next full walk (7
of them while draining 100,000 messages). In memory, deliveries and acks hardly collect
(0.06 µs a message): what they allocate dies by reference counting.

``tune_collector`` raises generation 0's threshold to ``GEN0_THRESHOLD`` (10,000) and keeps
the factors of 10 above it: a young collection after 10,000 net new container objects (a
Pull of 1,000 messages holds a few thousand until its answer is sent, so they can die by
reference counting before a collection walks and promotes them), a full one considered
every 1,000,000. The cost: cyclic garbage may wait for up to 10,000 container objects
(about a megabyte) before it is freed.

Measured with ``benchmarks/server_pull_ack.py``'s fill (server CPU a published message,
200,000 messages of 100 bytes, three alternated runs, load 3-6): 11.7 µs before, 7.1 µs
with 10,000 (one full walk left, 0.3 s), 7.3 with 50,000; ``gc.freeze()`` after start-up
(about 70,000 objects) 8.5 alone and nothing more with the threshold, so it is not used.
Pull and Acknowledge in memory: unchanged within the noise (7.7-8.3 µs); on the durable
server (100,000 messages, three alternated runs, load 20) 9.6 -> 6.9 µs plain and 10.7 ->
8.2 exactly-once, messages a second 33,000 -> 51,000 and 27,000 -> 48,000, no full walk
left. The setting is the server
process's own: ``run_server`` inside another program (a test) leaves that program's
collector alone.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 10_000


def tune_collector() -> None:
    """Raise generation 0's threshold; the older generations keep their factors."""
    _, generation1, generation2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, generation1, generation2)
