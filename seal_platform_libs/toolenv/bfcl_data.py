"""The installed ``bfcl-eval`` package's data folder, located without importing the package, and the error for
task data that is not usable.

Shared by the environments built on BFCL's data files: the ``bfcl`` plugin (multi-turn categories) and the
``bfcl_memory`` plugin (the memory category) both read their tasks, ground truth and tool docs from this folder.
What each reads from it stays in the plugin.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path


class DataError(ValueError):
    """The task data or a task selection is not usable; the message says how to fix it."""


@lru_cache(maxsize=1)
def data_dir() -> Path:
    """The ``bfcl_eval/data`` folder of the installed ``bfcl-eval`` package."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "the BFCL data files come from the 'bfcl-eval' package, which is not installed; "
            "install it with `pip install --no-deps bfcl-eval==2026.3.23` (or `make install`)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not path.is_dir():
        raise DataError(f"bfcl-eval is installed but has no data folder at {path}; reinstall bfcl-eval")
    return path
