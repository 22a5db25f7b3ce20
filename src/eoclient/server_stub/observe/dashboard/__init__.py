"""The reference server's web dashboard, at ``/dashboard`` (and ``/``) on the REST door.

Pages: ``/dashboard`` (topics, subscriptions, snapshots and schemas: properties, backlog,
oldest unacked age, rates and a backlog chart), ``/dashboard/topic?name=...`` (what was
published, the retention and backlog policies, the publish rate over the last hour, the
topic's subscriptions and snapshots, a publish form) and
``/dashboard/subscription?name=...`` (its numbers, the failed exactly-once acks by reason
and the redeliveries, charts of the backlog, the oldest unacknowledged age and the delivery
and ack rates, a peek at the next messages that takes no lease, and actions). What the
server's edge rooms do shows where it applies: a subscription's export (Cloud Storage or
BigQuery: its settings, state, the last objects or rows written, what failed), a topic's
ingestion (its source, state and what it ingested), a topic's or a subscription's message
transforms (the UDFs and their counts), and the overview's list of export subscriptions and
import topics. The pages refresh their numbers and charts in place. Actions are POSTs of
JSON to ``/dashboard/action`` — create a topic or a subscription, publish a message, seek to
a time or a snapshot, purge (seek to now, the service's way), skip messages by id, detach —
run through the services' method table (``Services.call``) exactly as the same RPC from a
client: validated, authorized, durable before the answer.

It sits behind the door's checks (Host, Origin, Content-Type, bearer tokens: the door
runs them before it hands a request here), so a page on another site can neither read it
nor drive its actions. With ``--auth-token-file`` open it as
``/dashboard?access_token=TOKEN``; the pages pass the token on, and a token limited to some
projects sees only those.

Rooms: ``site.py`` (``Dashboard``, what the REST door mounts: which paths are the
dashboard's, each page's data, the actions); one module per page, each a list of sections,
one per concern (``overview.py``, ``topic_page.py``, ``subscription_page.py``: a new panel
is a new section function in its page's ``SECTIONS``); ``edges.py`` (what the pages show
of the edge rooms the server hands ``Dashboard``: exports, ingestion, transforms, read
only) and ``edge_sections.py`` (their sections); ``frame.py`` (the page around the
sections, tables whose every column has a header, names and links), ``formats.py``
(numbers with their units, times as the command writes them) and ``charts.py`` (the SVG
charts), all pure; ``stats_history.py`` (the history behind the charts and rates, pure),
which ``Dashboard.sample_forever`` samples on the server's clock, a task the server starts
and stops.
"""
