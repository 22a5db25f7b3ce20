"""The verbs topics, subscriptions and snapshots have alike, written once: ``list`` (the
project's resources of one kind: a table, or a JSON list of records), ``describe`` (one
resource's fields, or its JSON record) and how a resource is shown after ``create`` and
``update``. Each kind's module describes itself in a :class:`ResourceVerbs` and adds the
two verbs to its group (:meth:`ResourceVerbs.add_to`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import click

from eoclient.admin import AdminClient, AsyncPager
from eoclient.cli.app import Invocation, common_options
from eoclient.cli.names import Kind
from eoclient.cli.views import Column, Record


class Named(Protocol):
    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=Named)


@dataclass(frozen=True)
class ResourceVerbs(Generic[R]):
    """How one kind of resource is read and shown by the command."""

    kind: Kind  # "topic": how its names are completed, and the argument's metavar
    plural: str  # "topics"
    columns: Sequence[Column[R]]  # list's table
    record: Callable[[R], Record]  # --format json
    fields: Callable[[R], Iterable[tuple[str, str]]]  # describe's two-column table
    get: Callable[[AdminClient, str], Awaitable[R]]
    list_all: Callable[[AdminClient, str], AsyncPager[R]]  # a project's, by project id

    def show(self, invocation: Invocation, resource: R, done: str = "") -> None:
        """``resource`` as describe shows it; after a change, ``done`` ("created") first."""
        out = invocation.output
        if out.json:
            out.document(self.record(resource))
            return
        if done:
            out.note(f"{done} {self.kind} {resource.name}")
        out.fields(self.fields(resource))

    def add_to(self, group: click.Group) -> None:
        """Add ``list`` and ``describe`` to ``group``."""
        group.add_command(self._list_command())
        group.add_command(self._describe_command())

    def _list_command(self) -> click.Command:
        @common_options
        def command(invocation: Invocation) -> None:
            project = invocation.required_project(f"{self.plural} list")

            async def call() -> list[R]:
                async with invocation.admin() as admin:
                    return await self.list_all(admin, project).collect()

            found = invocation.run(call())
            out = invocation.output
            if out.json:
                out.document([self.record(resource) for resource in found])
            elif found:
                out.rows(found, self.columns)
            else:
                out.note(f"no {self.plural} in projects/{project}")

        command.__doc__ = f"List the project's {self.plural}."
        return click.command("list")(command)

    def _describe_command(self) -> click.Command:
        @click.argument("resource", metavar=self.kind.upper())
        @common_options
        def command(invocation: Invocation, resource: str) -> None:
            name = invocation.name(self.kind, resource)

            async def call() -> R:
                async with invocation.admin() as admin:
                    return await self.get(admin, name)

            self.show(invocation, invocation.run(call()))

        command.__doc__ = f"Show {self.kind.upper()}'s properties."
        return click.command("describe")(command)
