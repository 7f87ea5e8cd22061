"""Which C allocator a CPU update runs with, and what to do when it is the C library's ``malloc``.

PyTorch's CPU tensors come from ``malloc``. glibc serves a request above its mmap threshold (at most 32 MiB)
with a fresh ``mmap`` and unmaps it when freed, so every large activation is faulted in and zeroed anew.
tcmalloc keeps freed memory for reuse. Preloaded, it made the packed update of bench_packed_update.py 1.33x
the padded one instead of 1.08-1.15x, and the default run 2:34-2:45 instead of 3:06-3:36 with 4.95 GB instead of 5.5
(docs/scaling.md, "The C allocator"). Setting glibc's options from inside the process does not do the same
(see there), so this module only detects and advises (a CPU run records the advice as a ``cpu_allocator``
event); ``make run`` preloads tcmalloc where it is installed.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Mapping

# Where distributions put tcmalloc, and its library names (the full one first: the one measured).
_DIRS = ("/usr/lib/*-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
_NAMES = ("libtcmalloc.so.4", "libtcmalloc_minimal.so.4")


def installed_tcmalloc() -> str | None:
    """The path of an installed tcmalloc library, or None."""
    for name in _NAMES:
        for directory in _DIRS:
            found = sorted(glob.glob(os.path.join(directory, name)))
            if found:
                return found[0]
    return None


def advice(env: Mapping[str, str] | None = None, tcmalloc: str | None = None, platform: str = sys.platform
           ) -> str | None:
    """What to tell a user who trains on the CPU of a Linux machine without tcmalloc preloaded (None: nothing).

    ``tcmalloc``: the installed library to name (``installed_tcmalloc()`` when the caller has looked)."""
    if not platform.startswith("linux"):
        return None
    if "tcmalloc" in (os.environ if env is None else env).get("LD_PRELOAD", ""):
        return None
    how = (f"preload it: LD_PRELOAD={tcmalloc} seal-platform run ..." if tcmalloc else
           "install tcmalloc (Debian/Ubuntu: libtcmalloc-minimal4) and preload it with LD_PRELOAD")
    return ("training on the CPU with the C library's malloc, which maps and faults in every tensor above 32 MiB "
            f"anew at each allocation; tcmalloc reuses them: {how} (make run does when it is installed). "
            "Measured here: the default run in 17-24% less time with 10% less memory, packed updates 1.33x "
            "padded instead of 1.08-1.15x (docs/scaling.md, 'The C allocator').")


if __name__ == "__main__":  # the Makefile's `run` asks here which library to preload (an empty line: none)
    print(installed_tcmalloc() or "")
