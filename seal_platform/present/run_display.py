"""What ``seal-platform run`` shows: library logs to ``<run dir>/run.log``, one live progress line, then the
end-of-run summary; the run's HTML report is written at the end (also after a failure, for what was done)."""

from __future__ import annotations

import contextlib
from typing import Any

from rich.console import Console

from ..tracking import failure_warnings
from .digest import LOG_FILE, load_digest
from .metrics import MetricCatalog
from .progress import RichProgress
from .safe import clean, markup_safe
from .summary import run_summary


def run_with_display(runner: Any, store: Any, console: Console, *, verbose: bool = False, live: bool = True,
                     report: bool = True) -> Any:
    """Run ``runner`` (a :class:`~seal_platform.loop.Runner` built with ``runner.progress`` as the display, or
    none) and print its summary on ``console``; returns the loop's RunSummary. Exceptions propagate after the
    log is closed and the terminal restored."""
    from ..runlog import quiet_terminal

    log_path = runner.run_dir / LOG_FILE
    console.print(f"run [bold]{markup_safe(runner.run_id)}[/] ({markup_safe(runner.config.name)}) in "
                  f"{markup_safe(runner.run_dir)}", highlight=False)
    if not verbose:
        console.print(f"library logs: {log_path} (-v shows them here)", highlight=False)
    if getattr(runner, "resumed", False):
        console.print(f"resuming run {runner.run_id} (from its last durable checkpoint, if any)", highlight=False)
    progress = runner.progress
    host = getattr(runner, "host", None)
    catalog = MetricCatalog.from_host(host) if host is not None else None  # the run's plugins' declarations
    if catalog is not None and isinstance(progress, RichProgress):
        progress.catalog = catalog
    earlier = {event.id for event in store.events(runner.run_id)}  # a resumed run's: said by the attempt that had them
    with quiet_terminal(log_path, verbose=verbose) as terminal:
        # The display and any warning draw on the real terminal while descriptors 1 and 2 point at the log (a
        # warning printed on `console` went to the log: unseen, and on a full disk an OSError of its own).
        shown = console if terminal is console.file else \
            Console(file=terminal, width=console.width if not console.is_terminal else None)
        if hasattr(progress, "console") and shown is not console:
            progress.console = shown
        ended = False
        try:
            result = runner.run()
            ended = True
        finally:
            # After a failure the report is written for what was done, if it can be; that it could not is not
            # said: the run's own error is the one paragraph the command ends with.
            report_path = _write_report(store, runner.run_id, shown, catalog, warn=ended) if report else None
    if getattr(runner, "resumed", False) and not live:  # the live display said so as the run went on
        if runner.start_step > 0:
            said = (f"resumed: steps 1-{runner.start_step} came from the checkpoint, step {runner.start_step + 1} "
                    "on ran now")
        elif getattr(runner, "restart_from", None) == 0:
            said = ("resumed: the run started again from step 1 as asked (--restart-from-step 0); its earlier "
                    "history and checkpoints were discarded")
        else:
            said = "resumed: there was no durable checkpoint yet, so the run started again from step 1"
        console.print(said, highlight=False)
    digest = load_digest(store, runner.run_id)
    if report_path is not None and host is not None and getattr(runner, "ctx", None) is not None:
        from ..tracking import track

        track(host, runner.ctx, "report", len(digest.steps), path=str(report_path))
    extra = getattr(progress, "extra_seconds", None) if live else None
    console.print(run_summary(digest, stage_extra=extra, report=str(report_path) if report_path else None,
                              log=str(log_path), catalog=catalog), highlight=False)
    # Trackers and end_run hooks that failed leave the run completed; the terminal still says so, once a plugin.
    for line in failure_warnings(e for e in store.events(runner.run_id) if e.id not in earlier):
        console.print(clean(line, lines=True), style="yellow", highlight=False, markup=False)
    return result


def _write_report(store: Any, run_id: str, console: Console, catalog: MetricCatalog | None = None, *,
                  warn: bool = True) -> Any:
    """Write the run's report; one warning on ``console`` when it cannot be written (``warn``), naming why."""
    from .html_report import write_run_report
    from .transcripts import report_transcripts

    try:
        return write_run_report(load_digest(store, run_id), transcripts=report_transcripts(store, run_id),
                                catalog=catalog)
    except Exception as exc:  # a failed report must not hide the run's outcome
        if not warn:
            return None
        from ..errors import SealError, as_sentence, disk_full

        why = str(exc) if isinstance(exc, SealError) else f"{type(exc).__name__}: {exc}"
        full = disk_full(getattr(store, "run_dir", None) or ".", exc) if not isinstance(exc, SealError) else None
        warning = f"warning: the report could not be written: {as_sentence(why)}" + (f" ({full})" if full else "") + \
            f" Write it later with: seal-platform report {run_id} --out FILE"
        # a terminal that cannot be written to either: the run's outcome comes first
        with contextlib.suppress(OSError, ValueError):
            console.print(clean(warning, lines=True), style="yellow", highlight=False, markup=False)
        return None
