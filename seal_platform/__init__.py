"""seal-platform: a plugin-based platform for training tool-use LLM agents with reinforcement learning.

The core (this package) knows nothing about any benchmark, model or training library: it defines the hook
specifications (:mod:`seal_platform.hookspecs`), the shared types (:mod:`seal_platform.types`), the plugin
manager factory, the recipe models, the run loop, the run store and the command line.
"""

from functools import cache

from .hookspecs import hookimpl  # plugins write `from seal_platform import hookimpl`

__all__ = ["__version__", "hookimpl"]


@cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("seal-platform")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> str:
    """``__version__``, looked up when first asked for: reading the installed package's metadata costs every
    process that imports the platform (tool workers, engine replicas, Ray actors) some 20-30 ms otherwise."""
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
