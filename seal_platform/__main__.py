"""The one entry of ``python -m seal_platform`` and of the ``seal-platform`` console script.

It imports the command line inside ``try``: a Ctrl-C while that import runs (its first few hundred
milliseconds: click, pydantic, the recipe models) ends as Ctrl-C does later, with "interrupted" and exit status
130, not a KeyboardInterrupt traceback. (The package itself, imported before this module, takes a few ms.)

The cyclic garbage collector is paused while the command line is imported: the import makes a few hundred
thousand objects (modules, classes, pydantic's schemas) that live as long as the process and are no garbage,
and collecting while it runs walks them again and again (about 50 ms, an eighth of a short command's start-up).
Afterwards they are left out of every later collection (``gc.freeze``, as a forked child does with what it
inherits) and the collector runs as usual for whatever the command does.

A command that asked for a quick exit (:mod:`seal_platform.quick_exit`: ``verify``, once its output is written)
ends here without the interpreter's teardown, its exit handlers run and its output flushed.
"""

from __future__ import annotations

import gc
import sys


def main() -> None:
    try:
        gc.disable()
        try:
            from .cli import main as cli_main
        finally:
            gc.freeze()
            gc.enable()

        try:
            cli_main()
        except SystemExit as exc:  # how the command line always ends
            from .quick_exit import exit_if_requested

            exit_if_requested(exc.code)  # a command that asked for it (verify) ends here, without teardown
            raise
    except KeyboardInterrupt as exc:  # one the command line has not handled itself (an import's, above all)
        signame, signum = getattr(exc, "signame", None), getattr(exc, "signum", None)  # seal_platform.errors.Terminated
        print(f"stopped by {signame}" if signame else "interrupted", file=sys.stderr)
        sys.exit(128 + signum if isinstance(signum, int) else 130)


if __name__ == "__main__":
    main()
