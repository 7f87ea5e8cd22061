"""The environment interface: what the core needs from a benchmark plugin."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .types import Interface, Task


@runtime_checkable
class Environment(Protocol):
    """A benchmark: its tasks and its pristine interface.

    Episodes themselves are run by the owning plugin's ``collect`` and ``evaluate`` hooks, which see the
    policy only through a :class:`seal_platform.engine.RolloutEngine`.
    """

    name: str

    def tasks(self, split: str) -> list[Task]:
        """The tasks of a split (``"train"``, ``"eval"``, ...), filtered as the plugin's settings say."""
        ...

    def pristine_interface(self) -> Interface:
        """Revision 0: the interface evaluation always uses, byte for byte."""
        ...


@runtime_checkable
class VerifyingEnvironment(Environment, Protocol):
    """An environment that can score a transcript offline (``seal-platform verify``). It is an
    :class:`Environment` too: without ``name``, ``tasks`` or ``pristine_interface`` it is not one, and
    ``verify`` says which of them it lacks."""

    def verify_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """Score one input record; return the output record: a dict that is JSON as it is (no NaN or
        infinity, no sets or other objects). Raise ``ValueError`` for a malformed record. ``verify`` checks
        what it gets: anything else (or an exception, ``SystemExit`` included) is an ``{"error": ...}`` line
        naming the plugin, in that record's place, and the other records are still scored."""
        ...


@runtime_checkable
class BatchVerifyingEnvironment(VerifyingEnvironment, Protocol):
    """A verifying environment that can also score many records in one call (much less overhead per
    record when verification runs in worker processes); ``seal-platform verify`` uses it when present."""

    def verify_records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One output record per input record, in order, each as :meth:`verify_record`'s (and checked as
        it is); a malformed record gets ``{"error": ...}``. A call that raises, or returns another number of
        records, has its records scored one by one with :meth:`verify_record`."""
        ...
