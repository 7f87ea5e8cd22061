"""The ray_backend plugin: scale-out on Ray (episodes as Ray actors, engine replicas, placement groups).

Nothing here is imported by the core, and nothing imports ``ray`` until a recipe asks for it
(``ray.enabled: true``); the single-machine default never starts Ray. See docs/scaling.md.
"""
