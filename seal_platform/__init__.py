"""seal-platform: a plugin-based platform for training tool-use LLM agents with reinforcement learning.

The core (this package) knows nothing about any benchmark, model or training library: it defines the hook
specifications (:mod:`seal_platform.hookspecs`), the shared types (:mod:`seal_platform.types`), the plugin
manager factory, the recipe models, the run loop, the run store and the command line.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("seal-platform")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

from .hookspecs import hookimpl  # noqa: E402  (plugins write `from seal_platform import hookimpl`)

__all__ = ["__version__", "hookimpl"]
