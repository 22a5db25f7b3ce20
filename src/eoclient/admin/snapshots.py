"""``AdminClient``'s snapshot methods and seek: create, get, update, list (a project's, a
topic's), delete, and moving a subscription's ack state to a time or to a snapshot
(google.pubsub.v1.Subscriber; a topic's snapshots are listed by the Publisher service).

Seek is here rather than with the subscriptions because a snapshot exists to be sought
to, as in the reference server's core (docs/protocol.md#seek-and-snapshots).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from eoclient._retrying import DEFAULT
from eoclient.admin import convert, rpc_requests
from eoclient.admin.calls import AdminCalls, AsyncPager, Retry, Timeout
from eoclient.admin.paths import project_of, snapshot_path
from eoclient.admin.types import UNSET, Snapshot, Unset

__all__ = ["SnapshotAdmin"]


class SnapshotAdmin(AdminCalls):
    """AdminClient's snapshot methods and seek (one of its bases)."""

    snapshot_path = staticmethod(snapshot_path)

    async def create_snapshot(
        self,
        name: str,
        subscription: str,
        *,
        labels: Mapping[str, str] | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Snapshot:
        """Snapshot ``subscription``'s unacked backlog (and everything published after)."""
        return convert.snapshot_from_pb(
            await self._call(
                rpc_requests.create_snapshot(name, subscription, labels or {}), retry, timeout
            )
        )

    async def get_snapshot(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> Snapshot:
        return convert.snapshot_from_pb(
            await self._call(rpc_requests.get_snapshot(name), retry, timeout)
        )

    async def update_snapshot(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | Unset = UNSET,
        expire_time: datetime.datetime | Unset | None = UNSET,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> Snapshot:
        """Change the given properties (the update mask names exactly those)."""
        changes = {"labels": labels, "expire_time": expire_time}
        return convert.snapshot_from_pb(
            await self._call(rpc_requests.update_snapshot(name, changes), retry, timeout)
        )

    def list_snapshots(
        self,
        project: str,
        *,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[Snapshot]:
        return self._pager(
            rpc_requests.list_snapshots,
            rpc_requests.snapshots_page,
            project_of(project),
            page_size,
            retry,
            timeout,
        )

    def list_topic_snapshots(
        self,
        topic: str,
        *,
        page_size: int | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[str]:
        """Names of the snapshots taken from the topic's subscriptions."""
        return self._pager(
            rpc_requests.list_topic_snapshots,
            rpc_requests.names_page,
            topic,
            page_size,
            retry,
            timeout,
        )

    async def delete_snapshot(
        self, name: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> None:
        await self._call(rpc_requests.delete_snapshot(name), retry, timeout)

    async def seek(
        self,
        subscription: str,
        *,
        time: datetime.datetime | None = None,
        snapshot: str | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> None:
        """Move the subscription's ack state to a point in time or to a snapshot.

        ``time`` (timezone-aware): retained messages published before it become
        acked, later ones unacked (acked messages come back only if the subscription
        retains them, ``retain_acked_messages``). ``snapshot``: the subscription's ack
        state becomes the snapshot's (same topic required). Exactly one of the two.
        """
        await self._call(
            rpc_requests.seek(subscription, time=time, snapshot=snapshot), retry, timeout
        )
