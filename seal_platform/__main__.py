"""The one entry of ``python -m seal_platform`` and of the ``seal-platform`` console script.

It imports the command line inside ``try``: a Ctrl-C while that import runs (its first few hundred
milliseconds: click, pydantic, the recipe models) ends as Ctrl-C does later, with "interrupted" and exit status
130, not a KeyboardInterrupt traceback. (The package itself, imported before this module, takes a few ms.)
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from .cli import main as cli_main

        cli_main()
    except KeyboardInterrupt as exc:  # one the command line has not handled itself (an import's, above all)
        signame, signum = getattr(exc, "signame", None), getattr(exc, "signum", None)  # seal_platform.errors.Terminated
        print(f"stopped by {signame}" if signame else "interrupted", file=sys.stderr)
        sys.exit(128 + signum if isinstance(signum, int) else 130)


if __name__ == "__main__":
    main()
