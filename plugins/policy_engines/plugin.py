"""The policy_engines plugin: the policy runtime's rollout engines, ``hf`` (transformers) and ``vllm``.

Registration only: the engines, their replicas and weight sync are the library
:mod:`seal_platform_libs.policy`. Settings sections: ``policy`` (the model the engines serve,
:class:`~seal_platform_libs.policy.loading.PolicySettings`) and ``engine``
(:class:`~seal_platform_libs.policy.engines.settings.EngineSettings`). An optimizer built on the runtime (grpo,
examples/seal-reinforce) puts the model it trains into ``ctx.shared`` under
:data:`~seal_platform_libs.policy.engines.POLICY_KEY`, so the engines sample from it; without one, they load
the model the ``policy`` section names.
"""

from __future__ import annotations

from typing import Any

from seal_platform.hookspecs import hookimpl
from seal_platform_libs.policy.engines import engine_specs
from seal_platform_libs.policy.engines.settings import EngineSettings
from seal_platform_libs.policy.loading import PolicySettings


@hookimpl
def register_settings() -> dict[str, type]:
    return {"policy": PolicySettings, "engine": EngineSettings}


@hookimpl
def register_rollout_engines() -> list[Any]:
    return engine_specs()
