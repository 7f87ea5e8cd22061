"""Engine replicas as local processes without Ray (``engine.replicas`` / ``engine.gpus``): two hf replicas on
the CPU built by the engine factory, both serving, routed by group, equal to the trainer bit for bit after each
weight push over the sync group (gloo; ``grpo.weight_sync: host``: the shared-memory file), a push reaching the
live replica when the other was killed unnoticed, failing over when one dies, and gone after close; the
shared-memory weight buckets; the derived settings."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

# The tests share one pair of replica processes (local_pair, below) and run in file order, the shutdown last: one
# xdist worker takes the whole file, and the pair starts once, not once per worker (~7 s each).
pytestmark = pytest.mark.xdist_group("local_replicas")

from seal_platform.config import RunConfig  # noqa: E402
from seal_platform.context import RunContext  # noqa: E402
from seal_platform.errors import ConfigError  # noqa: E402
from seal_platform.infra import InfraError  # noqa: E402
from seal_platform.types import Message, SamplingParams  # noqa: E402
from seal_platform_libs.policy.engines import POLICY_KEY, REPLICATED, buckets, engine_specs  # noqa: E402
from seal_platform_libs.policy.engines.settings import (  # noqa: E402
    EngineSettings,
    for_run,
    local_devices,
    per_replica,
    step_concurrency,
)
from seal_platform_libs.policy.tokens import prompt_ids  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from tests.grpo.checks import (  # noqa: E402
    SEQUENCES,
    bounded,
    conversation,
    language_model_step,  # noqa: E402
    scores_equal_the_trainers,
    trainer_logprobs,
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def local_pair(tokenizer, tmp_path_factory):
    """Two hf replicas on the CPU, built by the grpo engine factory from a run context (module-scoped: the
    tests run in file order, the replica kill and the shutdown last)."""
    from seal_platform_libs.policy.testing import tiny_llama

    model = tiny_llama(tokenizer, hidden_size=64, intermediate_size=128, max_position_embeddings=1024)
    ctx = RunContext(config=RunConfig(environment="toy", rollout={"engine": "hf", "workers": 4}), run_id="r",
                     run_dir=tmp_path_factory.mktemp("local-replicas"))
    ctx.shared[POLICY_KEY] = (model, tokenizer)
    ctx.settings["engine"] = EngineSettings.model_validate({"replicas": 2, "hf": {"max_batch_size": 4}})
    ctx.settings["grpo"] = GRPOSettings(weight_sync="collective", weight_sync_bucket_mb=1)  # in many buckets
    client = {spec.name: spec for spec in engine_specs()}["hf"].factory(ctx)
    yield client, model, tokenizer, ctx
    client.close()


def test_the_factory_starts_one_process_per_replica_on_the_cpu(local_pair):
    client, _, _, ctx = local_pair
    assert ctx.shared[REPLICATED] is client and client.name == "hfx2@local-cpu"
    info = [client._result(client._submit(i, "ready")) for i in range(2)]
    pids = [i["pid"] for i in info]
    assert len(set(pids)) == 2 and os.getpid() not in pids and pids == client.pids()
    assert [i["cuda_visible_devices"] for i in info] == ["", ""]  # CPU replicas see no GPU
    assert client.max_model_len == 1024


def test_both_replicas_serve_and_a_group_stays_on_one(local_pair):
    client, _, _, _ = local_pair
    sampling = SamplingParams(temperature=1.0, max_new_tokens=4, seed=1)
    first = client.generate([conversation(0)] * 3, sampling)
    client.generate([conversation(0, "And two more?")], sampling)
    client.generate([conversation(1)] * 3, sampling)
    assert all(g.token_ids and len(g.logprobs) == len(g.token_ids) for g in first)
    assert sorted(client.assignment().values()) == [0, 1]  # two groups, one per replica
    assert sorted(s["requests"] for s in client.stats()) == [3, 4]  # group 0 and its next turn, group 1


def test_replicas_logprobs_equal_the_trainers_after_a_weight_push(local_pair):
    client, model, tokenizer, _ = local_pair
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    prompt = prompt_ids(tokenizer, conversation(10))
    before = client._result(client._submit(0, "generate_ids", [prompt], greedy))[0]
    with torch.no_grad():  # an "update": every weight moves
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    client.update_weights(model, version=3)
    assert client.sync_stats["tensors"] == len(model.state_dict()) - 1  # the tied output layer travels once
    assert client.sync_stats["buckets"] > 1 and client.policy_version == 3  # over the sync group
    for index in range(2):
        gen = client._result(client._submit(index, "generate_ids", [prompt], greedy))[0]
        assert gen.policy_version == 3 and gen.token_ids
        ours = trainer_logprobs(model, prompt, gen.token_ids)
        assert torch.allclose(torch.tensor(gen.logprobs), ours, atol=1e-4), (index, gen.logprobs, ours.tolist())
        if gen.token_ids == before.token_ids:  # same continuation: its log-probs must have moved with the weights
            assert not torch.allclose(torch.tensor(gen.logprobs), torch.tensor(before.logprobs), atol=1e-4)
    with torch.no_grad():
        model.model.norm.weight.mul_(1.5)
    client.update_weights(model)  # hf replicas get only what changed
    assert client.sync_stats["tensors"] == 1 and client.policy_version == 4
    gen = client._result(client._submit(1, "generate_ids", [prompt], greedy))[0]
    assert torch.allclose(torch.tensor(gen.logprobs), trainer_logprobs(model, prompt, gen.token_ids), atol=1e-4)
    scores_equal_the_trainers(client, model)


def test_after_each_of_several_updates_every_replica_equals_the_trainer_bit_for_bit(local_pair):
    client, model, tokenizer, _ = local_pair
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.tensor([SEQUENCES[0]])
    pusher = client._pusher
    for k in range(3):  # a real update each time: a loss, its gradients, an optimizer step
        language_model_step(model, ids, optimizer)
        version = client.policy_version + 1
        bounded(lambda: client.update_weights(model), 120)
        assert client.policy_version == version and client.sync_stats["buckets"] > 1
        assert client.sync_stats["put_s"] == 0.0  # nothing went through the shared-memory file
        assert client._pusher is pusher and pusher.group is not None and pusher.key[0] == (0, 1)  # one group, kept
        scores_equal_the_trainers(client, model)
        gen = client._result(client._submit(k % 2, "generate_ids", [SEQUENCES[1]], SamplingParams(max_new_tokens=2)))[0]
        assert gen.policy_version == version


@pytest.mark.parametrize("mode", ["host", "auto"])
def test_weight_sync_host_pushes_through_the_shared_memory_file(tokenizer, mode):
    """``host``, and ``auto`` (the default) for a policy in host memory: the shared-memory file, not a group."""
    from seal_platform_libs.policy.engines.local import start_local_replicas
    from seal_platform_libs.policy.testing import tiny_llama

    model = tiny_llama(tokenizer, hidden_size=64, intermediate_size=128, max_position_embeddings=256)
    client = start_local_replicas("hf", model, tokenizer, EngineSettings(), [None], seed=0, weight_sync=mode)
    try:
        assert (client._pusher is None) == (mode == "host")
        assert GRPOSettings().weight_sync == "auto"
        for k in range(2):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            bounded(lambda: client.update_weights(model), 120)
            assert client.policy_version == k + 1 and "buckets" not in client.sync_stats
            assert client.sync_stats["put_s"] > 0
            scores_equal_the_trainers(client, model)
    finally:
        client.close()


def test_a_push_reaches_the_live_replica_and_requests_fail_over_when_one_dies(local_pair):
    client, model, tokenizer, _ = local_pair
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    client.generate([conversation(20)], greedy)
    from seal_platform_libs.policy.engines.routing import routing_key

    index = client.assignment()[routing_key(conversation(20))]
    assert client._pusher.key[0] == (0, 1)  # the group of both, from the pushes before
    os.kill(client.pids()[index], signal.SIGKILL)  # nothing tells the client (no request, no probe)
    # Gone before the push. Its sentinel says so: in the full suite something else in this process reaps
    # children, after which is_alive() stays True for a dead one (CI saw the push meet the dead member in the
    # old group and fall back to the host path, then is_alive() still True 120 s after the kill).
    from multiprocessing.connection import wait

    assert wait([client.replicas[index].process.sentinel], timeout=120)
    with torch.no_grad():
        model.model.norm.weight.mul_(0.9)
    version = client.policy_version + 1
    bounded(lambda: client.update_weights(model), 60)  # no rendezvous waits for the dead replica
    assert client.live() == [1 - index] and client.policy_version == version
    assert client._pusher.key[0] == (1 - index,) and client.sync_stats["tensors"] == 1  # a new group, the live one
    scores_equal_the_trainers(client, model)
    prompt = prompt_ids(tokenizer, conversation(20))
    alone = client._result(client._submit(1 - index, "generate_ids", [prompt], greedy))[0]
    after = client.generate([conversation(20)], greedy)[0]  # its group's replica is gone: served by the other
    assert after.token_ids == alone.token_ids and after.policy_version == version
    assert client.probe(timeout_s=10) == [1 - index]


def test_close_stops_every_replica_process(local_pair):
    client, _, _, _ = local_pair
    pids = client.pids()
    client.close()
    assert not any(_alive(pid) for pid in pids)
    assert not any(r.process.is_alive() for r in client.replicas)
    with pytest.raises(InfraError):
        client.generate([conversation(30)], SamplingParams(max_new_tokens=2))
    client.close()  # twice is fine


def test_buckets_carry_tensors_of_every_dtype_through_one_file():
    named = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16), "c": torch.arange(6).view(2, 3),
             "d": torch.tensor([True, False, True]), "e": torch.randn(4, 6).t()}  # "e" is not contiguous
    bucket = buckets.write(named)
    try:
        assert Path(bucket.path).is_file()
        back = buckets.read(bucket.to_dict())
        assert set(back) == set(named)
        for name, tensor in named.items():
            assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
    finally:
        bucket.remove()
    assert not Path(bucket.path).exists()


def test_max_num_seqs_is_derived_from_the_steps_episodes():
    config = RunConfig(environment="toy", rollout={"workers": 64}, training={"tasks_per_step": 32, "group_size": 8})
    assert step_concurrency(config) == 64
    assert for_run(EngineSettings(), config).vllm.max_num_seqs == 64
    assert for_run(EngineSettings(), config, replicas=4).vllm.max_num_seqs == 16
    assert for_run(EngineSettings(), config, replicas=3).vllm.max_num_seqs == 24  # 8 groups: 3 + 3 + 2, whole
    few = RunConfig(environment="toy", rollout={"workers": 64}, training={"tasks_per_step": 2, "group_size": 4})
    assert for_run(EngineSettings(), few).vllm.max_num_seqs == 8  # the step has only 8 episodes
    fixed = EngineSettings.model_validate({"vllm": {"max_num_seqs": 5}})
    assert for_run(fixed, config, replicas=4).vllm.max_num_seqs == 5  # a set value stands
    assert per_replica(10, 4, 1) == 3 and per_replica(1, 8, 8) == 1


def test_local_devices_one_replica_per_gpu_or_as_set():
    auto = EngineSettings()
    assert local_devices(auto, 0) is None and local_devices(auto, 1) is None  # in this process, as before
    assert local_devices(auto, 4) == [0, 1, 2, 3]
    assert local_devices(EngineSettings(gpus=[2, 3]), 4) == [2, 3]
    assert local_devices(EngineSettings(replicas=2), 0) == [None, None]  # on the CPU
    assert local_devices(EngineSettings(replicas=3, gpus=[0, 1]), 2) == [0, 1, 0]
    assert local_devices(EngineSettings(replicas=1), 1) == [0]  # one engine, in a process of its own
    with pytest.raises(ConfigError, match="settings.engine.gpus names GPU"):
        local_devices(EngineSettings(gpus=[4]), 2)
    with pytest.raises(ValueError, match="distinct"):
        EngineSettings(gpus=[1, 1])


def test_replica_settings_are_checked_against_where_the_run_goes():
    pytest.importorskip("ray")
    from seal_platform.planning import recipe_problems

    _, issues, _ = recipe_problems("seal-ray", ["settings.engine.replicas=2"])
    where = {i.where: str(i) for i in issues}
    assert set(where) == {"settings.engine.replicas"} and "settings.grpo.replicas" in where["settings.engine.replicas"]
    _, issues, _ = recipe_problems("seal-ray", ["settings.ray.enabled=false", "rollout.executor=local"])
    where = {i.where: str(i) for i in issues}
    assert set(where) == {"settings.grpo.replicas"} and "settings.engine.replicas" in where["settings.grpo.replicas"]
    _, issues, _ = recipe_problems("seal", ["settings.engine.replicas=2", "settings.engine.gpus=[0,1]"])
    assert not issues  # local replicas without Ray are fine (the GPUs are checked on the machine that runs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_engine_gpus_this_machine_lacks_are_refused_before_the_run():
    from seal_platform_libs.policy.loading import PolicySettings
    from seal_platform_plugins.grpo.plugin import check_machine

    config = RunConfig(environment="toy", rollout={"engine": "hf"})
    settings = {"policy": PolicySettings(device="cpu"), "engine": EngineSettings(gpus=[0, 1])}
    (problem,) = check_machine(config, settings, None)
    assert "settings.engine.gpus names GPU(s) [0, 1]" in problem and "sees 0 GPU(s)" in problem
    assert check_machine(config, {"policy": PolicySettings(device="cpu"), "engine": EngineSettings(replicas=2)},
                         None) == []  # CPU replicas need no GPU


def test_the_memory_plan_puts_a_local_vllm_replica_on_every_gpu():
    from seal_platform_libs.policy.loading import PolicySettings
    from seal_platform_libs.policy.memory_plan import plan
    from seal_platform_plugins.grpo.settings import GRPOSettings

    config = RunConfig(environment="bfcl", stages={"optimize": "grpo"}, rollout={"engine": "vllm"})
    settings = {"grpo": GRPOSettings(), "policy": PolicySettings(model="Qwen/Qwen2.5-3B", device="cuda"),
                "engine": EngineSettings()}
    result = plan(config, settings, gpus=4, gpu_memory=80)
    assert [d.holders for d in result.gpus] == [["trainer", "vLLM replica 0"], ["vLLM replica 1"],
                                                   ["vLLM replica 2"], ["vLLM replica 3"]]
    one = plan(config, settings, gpus=1, gpu_memory=80)  # one GPU: the engine in the trainer's process, as before
    assert [d.holders for d in one.gpus] == [["trainer", "vLLM"]]
    settings["engine"] = EngineSettings(gpus=[2, 3])
    assert [d.holders for d in plan(config, settings, gpus=4, gpu_memory=80).gpus] == [
        ["trainer"], [], ["vLLM replica 0"], ["vLLM replica 1"]]


# A whole run with two replica processes (~16 s of a worker): `make test-slow` runs it. What `make test` keeps:
# the replicas from the engine factory serving, syncing, failing over and closing (the tests above), and whole
# runs on one hf engine (tests/grpo/test_overlap_grpo.py, tests/openenv_env/test_openenv_example_run.py).
@pytest.mark.slow
def test_a_run_with_two_local_replicas_completes_and_leaves_no_process(tmp_path, tiny_model_dir):
    psutil = pytest.importorskip("psutil")
    from seal_platform.loop import Runner
    from seal_platform.planning import plan_recipe
    from seal_platform.store import RunStore

    small = ["training.steps=1", "training.tasks_per_step=2", "training.group_size=2", "rollout.workers=4",
             "rollout.max_new_tokens=8", "evaluation.max_new_tokens=8", "evaluation.before_training=false",
             "settings.smarthome.n_eval=2", "settings.grpo.train_layers=1", "rollout.engine=hf",
             "settings.engine.replicas=2", f"runs_dir={tmp_path}", f"settings.policy.model={tiny_model_dir}"]
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    plan = plan_recipe("smarthome-fixed-label", small)
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    runner.run()
    assert store.get_run(runner.run_id).status == "completed"
    trajs = store.trajectories(runner.run_id, step=0, phase="train")
    assert len(trajs) >= 4 and all(t.infra_failure is None for t in trajs)
    client = runner.ctx.shared[REPLICATED]  # the run's engine was the two local replicas, now closed
    assert client.name == "hfx2@local-cpu" and all(n > 0 for n in client.requests), client.requests  # both served
    assert not any(r.process.is_alive() for r in client.replicas)
    left = [p for p in me.children(recursive=True) if p.pid not in before
            and not any("resource_tracker" in part for part in p.cmdline())]
    _, alive = psutil.wait_procs(left, timeout=30)
    assert not alive, f"processes left after the run: {[(p.pid, p.cmdline()) for p in alive]}"


def test_the_routing_key_is_the_prompt_before_the_first_sampled_message():
    from seal_platform_libs.policy.engines.routing import routing_key

    few_shot = [Message(role="system", content="Tools: ..."), Message(role="user", content="Example: lights on"),
                Message(role="assistant", content="<tool_call>{...}</tool_call>"), Message(role="tool", content="ok")]
    task_a = [*few_shot, Message(role="user", content="Turn the heater off")]
    task_b = [*few_shot, Message(role="user", content="Lock the door")]
    assert routing_key(task_a) != routing_key(task_b)  # a shared few-shot opening does not merge the tasks
    sampled = Message(role="assistant", content="<tool_call>...</tool_call>", token_ids=[5, 6], trainable=True)
    later = [*task_a, sampled, Message(role="tool", content="done"), Message(role="user", content="And the fan?")]
    assert routing_key(later) == routing_key(task_a)  # the dialogue's later turns stay with its group
