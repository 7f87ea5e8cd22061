"""The typed contract between a plugin that registers a compute cluster and the plugins that use it.

Imports nothing of the core (the run context and the registry refer to it).
"""

from __future__ import annotations

from typing import Protocol


class Cluster(Protocol):
    """A compute cluster a plugin connects the run to (Ray, say), the typed contract between the plugin that
    registers it (``register_clusters``) and the plugins that run parts of the run on it (executors, engine
    replicas, trainer groups). The core builds the one the recipe enables and hands it over as ``ctx.cluster``
    (and to ``check_config`` / ``check_machine`` as ``cluster``).

    Every user takes a lease with :meth:`acquire` before using the cluster's own API and gives it back with
    :meth:`release`; the last release shuts down what the first acquire started (a joined cluster is only
    disconnected from). Leases are counted per process, whoever takes them.
    """

    @property
    def name(self) -> str:
        """The registered name (``ClusterSpec.name``): users check it before using that cluster's API."""
        ...

    @property
    def address(self) -> str | None:
        """The existing cluster this process joins (its machines, not this one, run the work); None: one
        started on this machine."""
        ...

    def acquire(self) -> None:
        """Connect this process (once; later calls only count the lease)."""
        ...

    def release(self) -> None:
        """Give a lease back; the last one shuts down or disconnects."""
        ...

    def infra_errors(self) -> tuple[type[BaseException], ...]:
        """The cluster's exceptions that mean the infrastructure (a lost node or actor), not the code, failed."""
        ...
