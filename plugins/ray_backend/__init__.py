"""The ray_backend plugin: scale-out on Ray (the ``ray`` cluster other plugins use through ``ctx.cluster``, and
the ``ray`` executor: episodes as Ray actors).

Nothing here is imported by the core, and nothing imports ``ray`` until a recipe asks for it
(``settings.ray.enabled: true``); the single-machine default never starts Ray. See docs/scaling.md.
"""
