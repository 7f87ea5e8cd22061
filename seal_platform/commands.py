"""What a command of the ``seal-platform`` CLI needs, the core's and a plugin's alike (``register_commands``):
the terminal consoles, the ``--store`` option and the store it opens, a recipe's arguments split from its
overrides, and the one-paragraph messages. A plugin imports these from here, never :mod:`seal_platform.cli`
(tests/core/test_plugin_boundaries.py)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from .config import as_store_url
from .errors import SealError, Terminated

ENV_STORE = "SEAL_PLATFORM_STORE"

console = Console(soft_wrap=True)  # standard output
errors = Console(stderr=True, soft_wrap=True)  # standard error

# Where a command records the store it opened (click's context meta), so that a database failure later in the
# command names that store (seal_platform.cli.SealGroup).
STORE_URL_KEY = "seal_platform.store_url"


def clean(value: Any) -> str:
    """Plugin- or model-supplied text made safe for the terminal (:func:`.present.safe.clean`: control
    characters shown, not obeyed; newlines kept)."""
    from .present.safe import clean as safe

    return safe(value, lines=True)


def print_error(exc: BaseException) -> None:
    """``Error: <message>`` on standard error: the message as text (a "[binary]" in it is not rich markup, an
    escape sequence in a plugin's exception is not obeyed), a secret in it (a URL's password, a recipe's
    token) not shown."""
    from rich.markup import escape

    from .recipe_secrets import scrub

    errors.print(f"[bold red]Error:[/] {escape(clean(scrub(str(exc))))}", highlight=False, markup=True,
                 soft_wrap=True)


def warn_failed_plugins(host: Any) -> None:
    """Name the plugins that failed to load, with their errors (the command goes on without them)."""
    for record in host.failed():
        errors.print(clean(f"warning: plugin {record.name!r} ({record.distribution or record.value}) was not "
                           f"loaded: {record.error}"), highlight=False, markup=False)


def split_recipe_args(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """``[RECIPE] [KEY=VALUE ...]`` as (the recipe or None, the overrides): the first argument is the recipe
    unless it is an override."""
    if args and "=" not in args[0]:
        return args[0], list(args[1:])
    return None, list(args)


def env_store_url() -> str | None:
    """The store ``$SEAL_PLATFORM_STORE`` names, as a URL; None where it is unset or empty."""
    value = os.environ.get(ENV_STORE)
    return as_store_url(value) if value else None


def default_store_url() -> str:
    return env_store_url() or as_store_url("runs/store.sqlite")


def store_option_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """The click callback of ``--store``: a path or URL as a store URL."""
    return as_store_url(value) if value else value


store_option = click.option("--store", "store_url", default=None, callback=store_option_url,
                            help=f"Run store: an SQLAlchemy URL or an SQLite file's path (default: ${ENV_STORE} or "
                                 "runs/store.sqlite).")


def open_store(url: str | None, *, write: bool = False) -> Any:
    """An existing store for a command. A command that only reads (``write=False``) opens an SQLite store
    read-only: it never creates, migrates or changes the journal mode of the file, and a file that is not a
    seal-platform store is refused as such."""
    from .store import RunStore

    url = url or default_store_url()
    context = click.get_current_context(silent=True)
    if context is not None:  # named by SealGroup.invoke if the database fails later in the command
        context.meta[STORE_URL_KEY] = url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise SealError(f"no run store at {url.removeprefix('sqlite:///')}: no run has been made here yet "
                        f"(give --store or set {ENV_STORE}).")
    # Either way the store must exist (create=False): a database without seal-platform's tables is refused.
    store = RunStore(url, read_only=not write and url.startswith("sqlite:"), create=False)
    store.on_damage = _say_damage  # a row that cannot be read: one line, and the command goes on
    return store


def _say_damage(line: str) -> None:
    """One line on standard error for a row of the store that could not be read (:mod:`.store.untrusted`)."""
    errors.print(f"warning: {clean(line)}", style="yellow", highlight=False, markup=False, soft_wrap=True)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within: SIGTERM and SIGHUP (the terminal or SSH session that started the command closed) stop the
    command the way Ctrl-C does (:class:`~.errors.Terminated`, a KeyboardInterrupt), so its clean-up runs (a
    run is marked ``interrupted`` and can be resumed). A SIGHUP that is ignored (``nohup``) stays ignored;
    outside the main thread nothing changes."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise Terminated(signal.Signals(signum).name, signum)

    handled = [signal.SIGTERM] + [signal.SIGHUP] * (signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN)
    previous = {signum: signal.signal(signum, stop) for signum in handled}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def store_failure(ctx: click.Context, exc: BaseException) -> SealError | None:
    """``exc`` as a store error naming the store a command opened (:func:`open_store` records it), if it is the
    database's refusal of the store (sqlalchemy's DatabaseError or OperationalError itself, not an IntegrityError or a
    bug's ProgrammingError); None otherwise."""
    db_errors = sys.modules.get("sqlalchemy.exc")  # not loaded: no store was opened
    if db_errors is None or type(exc) not in (db_errors.DatabaseError, db_errors.OperationalError):
        return None
    from .store import safety

    url = ctx.meta.get(STORE_URL_KEY) or default_store_url()
    return safety.describe(url, exc, None)


# Options a command no longer has, each with what replaces it (docs/scaling.md, "Migrating recipes"); VALUE is
# the value given with the option.
REMOVED_OPTIONS = {
    ("run", "--ray-address"): "settings.ray.enabled=true settings.ray.address=VALUE",
}


def refuse_unknown_options(ctx: click.Context, _param: click.Parameter, args: tuple[str, ...]) -> tuple[str, ...]:
    """The click callback of the arguments of a command that takes unknown options as arguments (``run``'s
    RECIPE and overrides): an argument that looks like an option but is none of the command's is refused (a
    mistyped ``--resum`` would otherwise be read as a recipe's name and ``--quite`` as an override): "no such
    option", with the closest of its options, or, for an option it no longer has (:data:`REMOVED_OPTIONS`),
    what replaces it. Exit status 2, as for click's own usage errors."""
    import difflib

    command = ctx.command.name or ""

    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg == "-":
            continue
        name, eq, value = arg.partition("=")
        if (command, name) in REMOVED_OPTIONS:
            given = value if eq else (args[i + 1] if i + 1 < len(args) and "=" not in args[i + 1] else "VALUE")
            raise click.UsageError(
                f"{command} has no option {name} any more: give "
                f"{REMOVED_OPTIONS[command, name].replace('VALUE', given)} instead (a plugin's options "
                "are its settings; docs/scaling.md, 'Migrating recipes').",
                ctx,
            )
        names = [opt for param in ctx.command.get_params(ctx) for opt in (*param.opts, *param.secondary_opts)
                 if opt.startswith("-")]
        meant = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        guess = (
            f"did you mean {meant[0]}?"
            if meant
            else f"{command}'s options: {', '.join(sorted(names))}; a recipe file whose name starts with '-' is "
            f"given as ./{arg}"
        )
        raise click.UsageError(f"no such option: {name} ({guess})", ctx)
    return args
