"""The default plugins of seal-platform, installed as ``seal_platform_plugins``.

Each sub-package is registered through the ``seal_platform`` entry-point group exactly as a third-party
plugin is; the core never imports from here.
"""
