"""The library floor between the core (``seal_platform``) and the plugins.

Libraries import only the core (and each other); plugins import the core and libraries, never each other;
the core imports no library (``tests/core/test_plugin_boundaries.py``).

* :mod:`seal_platform_libs.policy`: the policy runtime any optimizer can use -- loading the policy, the ``hf``
  and ``vllm`` rollout engines and their replicas, weight sync, token sequences, LoRA, model shapes, the memory
  planner, devices and Ray placement, kernels and tiny test models.
* :mod:`seal_platform_libs.toolenv`: what tool environments share -- tool docs, call formats and parsers,
  interface revisions and their evolution, the episode helpers.
"""
