"""The policy runtime: what every optimizer of a tool-use policy needs besides its loss.

:mod:`.loading` loads the policy (the embedded SmolLM2 or a local folder); :mod:`.engines` serves it for
rollouts (``hf``, ``vllm``, local or Ray replicas) and takes new weights (:mod:`.weight_sync`);
:mod:`.tokens` turns episodes into exact token sequences; :mod:`.lora`, :mod:`.packing` and the kernels
(:mod:`.rotary`, :mod:`.output_head`) serve the update; :mod:`.memory_plan` plans GPU memory;
:mod:`.testing` builds tiny random models for tests. Heavy imports (torch, transformers, vllm, ray) happen
inside functions.
"""
