"""A complete toy plugin for the core's tests: an environment, an engine, a diagnoser and every stage.

It answers additions; the engine's chance of a right answer grows with each `optimize`, so a run shows a
learning curve without any model. Every hook call is appended to ``plugin.calls``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from seal_platform.config import Issue
from seal_platform.hookspecs import hookimpl
from seal_platform.infra import InfraError, failed_trajectory
from seal_platform.registry import ClusterSpec, DiagnoserSpec, EngineSpec, EnvironmentSpec, ExecutorSpec, MetricSpec
from seal_platform.types import (
    EvalResult,
    Generation,
    Interface,
    Message,
    ReweightResult,
    Task,
    Trajectory,
    TurnLabel,
    TurnVerdict,
)


class ToySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n_tasks: int = 12
    # A task file as environments read them: its text goes into every task's payload (``note``), so editing it
    # between an interrupt and a resume changes the run's task data.
    task_file: str | None = None
    start_skill: float = 0.2
    skill_step: float = 0.1
    fail_in: str | None = None  # name of a stage that raises, for failure tests
    # With fail_in: fill the filesystem holding this folder first (the store cannot record the failure).
    fill_disk_at_failure: str | None = None
    # Simulates a one-off kill: if this file exists when `optimize` runs step `interrupt_step`, the file is
    # removed and KeyboardInterrupt raised (a resumed run, whose recipe is the same, then goes through).
    interrupt_file: str | None = None
    interrupt_step: int = -1
    interrupt_stage: str = "optimize"  # or "evaluate" (the evaluation after `interrupt_step` steps)
    # The first N episodes of every step fail as the infrastructure would (InfraError inside the episode).
    infra_fail_first: int = 0
    # Training outcomes independent of the engine: "every_third" passes sample 0 of the tasks whose index is a
    # multiple of 3 and fails the rest (so exactly those groups are mixed); "never" fails every episode.
    outcomes: str = "engine"
    # Seconds each `optimize` sleeps (a run that lasts long enough to be signalled), from step
    # `optimize_sleep_from_step` on (earlier steps do not sleep).
    optimize_sleep_s: float = 0.0
    optimize_sleep_from_step: int = 0
    # A problem `check_machine` reports (as a plugin would report a GPU this machine lacks).
    refuse_machine: str | None = None
    # Enables the `toy-cluster` (register_clusters) at this address; `needs_cluster`: check_config refuses a
    # recipe without it (as grpo refuses replicas without Ray).
    cluster: str | None = None
    needs_cluster: bool = False
    # Checkpoints hold the engine's whole random state (so a resumed run samples exactly what an
    # uninterrupted one did, with outcomes "engine"); off, only the skill is restored.
    restore_rng: bool = False
    # Seconds each episode's generation takes (rollouts long enough to overlap an update).
    generate_sleep_s: float = 0.0
    # Data a buggy environment returns, for the core's checks: "duplicate_ids" (collect: one id for all),
    # "task_sample_ids" (collect and evaluate: ids f"{task_id}:{sample}", which repeat across steps),
    # "nan_reward" / "inf_reward" (collect), "eval_nan_reward", "eval_none_for_a_task" (evaluate drops its last
    # task), "eval_empty" (evaluate returns []), "eval_rate_7" (a pass rate of 700%).
    bad_data: str | None = None


def _spoil(trajectories: list[Trajectory], bad: str | None, evaluate: bool) -> list[Trajectory]:
    """``trajectories`` as ``bad_data`` makes a buggy environment return them."""
    if bad == "task_sample_ids":
        for t in trajectories:
            t.id = f"{t.task_id}:{t.sample}"
    elif evaluate and bad == "eval_nan_reward":
        trajectories[0].reward = float("nan")
    elif evaluate and bad == "eval_none_for_a_task":
        return trajectories[:-1]
    elif evaluate and bad == "eval_empty":
        return []
    elif not evaluate and bad == "duplicate_ids":
        for t in trajectories:
            t.id = "same"
    elif not evaluate and bad in ("nan_reward", "inf_reward"):
        trajectories[-1].reward = float("nan" if bad == "nan_reward" else "inf")
    return trajectories


class ToyCluster:
    """A cluster (the core's ``Cluster`` contract) that only counts its leases."""

    name = "toy-cluster"

    def __init__(self, address: str):
        self.address = address
        self.leases = 0

    def acquire(self) -> None:
        self.leases += 1

    def release(self) -> None:
        self.leases -= 1

    def infra_errors(self) -> tuple[type[BaseException], ...]:
        return (ConnectionError,)


class ToyEnvironment:
    name = "toy"

    def __init__(self, settings: ToySettings):
        self.settings = settings

    def tasks(self, split: str) -> list[Task]:
        if split not in ("train", "eval", "test", "ood"):
            raise ValueError(f"unknown split {split!r}: the toy has 'train', 'eval', 'test' and 'ood'")
        offset = 0 if split == "train" else 1000
        note = {"note": Path(self.settings.task_file).read_text()} if self.settings.task_file else {}
        return [
            Task(id=f"{split}-{i}", category="small" if i % 2 else "big", split=split,
                 payload={"a": offset + i, "b": i * 3, **note})
            for i in range(self.settings.n_tasks)
        ]

    def pristine_interface(self) -> Interface:
        return Interface(revision=0, system_text="Add the numbers.")

    def verify_record(self, record: dict) -> dict:
        if "task_id" not in record or "answer" not in record:
            raise ValueError("need task_id and answer")
        return {"task_id": record["task_id"], "success": record["answer"] == 42}


class ToyEngine:
    name = "toy-engine"

    def __init__(self, skill: float, seed: int, sleep_s: float = 0.0):
        self.skill = skill
        self.rng = random.Random(seed)
        self.version = 0  # the policy version: optimize updates applied ("weights pushed")
        self.sleep_s = sleep_s
        self.closed = False

    def generate(self, conversations, sampling):
        out = []
        for conv in conversations:
            version, skill = self.version, self.skill  # what this generation samples with
            if self.sleep_s:
                import time

                time.sleep(self.sleep_s)
            a, b = json.loads(conv[-1].content)
            right = self.rng.random() < skill
            text = str(a + b if right else a + b + 1)
            out.append(Generation(text=text, token_ids=[len(text)], logprobs=[-0.5], policy_version=version))
        return out

    def count_tokens(self, conversation):
        return sum(len(m.content) for m in conversation)

    def close(self):
        self.closed = True


def _episode(engine: ToyEngine, task: Task, interface: Interface, group: str, sample: int, greedy: bool,
             outcomes: str = "engine") -> Trajectory:
    prompt = [Message(role="system", content=interface.system_text),
              Message(role="user", content=json.dumps([task.payload["a"], task.payload["b"]]))]
    gen = engine.generate([prompt], None)[0]
    ok = gen.text == str(task.payload["a"] + task.payload["b"])
    if outcomes != "engine":
        ok = outcomes == "every_third" and int(task.id.split("-")[1]) % 3 == 0 and sample == 0
    reply = Message(role="assistant", content=gen.text, token_ids=gen.token_ids, logprobs=gen.logprobs, trainable=True,
                    policy_version=gen.policy_version)
    return Trajectory(task_id=task.id, category=task.category, group=group, sample=sample,
                      interface_revision=interface.revision, messages=[*prompt, reply], reward=float(ok),
                      turn_verdicts=[TurnVerdict(turn=0, passed=ok)])


class SerialExecutor:
    """Episodes one after another in this thread (a registered executor, for the hook's tests)."""

    def __init__(self, on_progress=None):
        self.on_progress = on_progress
        self.mapped = 0
        self.closed = False

    def map(self, fn, items, *, on_infra_failure=None):
        out = []
        for item in items:
            try:
                out.append(fn(item))
            except InfraError as exc:
                if on_infra_failure is None:
                    raise
                out.append(on_infra_failure(item, f"serial: {exc}"))
            self.mapped += 1
        return out

    def close(self):
        self.closed = True


def _fill_disk(folder: Path) -> None:
    """Take every free byte of the filesystem holding ``folder`` (a ballast file there, unbuffered)."""
    with open(folder / "ballast-at-failure", "wb", buffering=0) as fh:
        for chunk in (b"\0" * 65536, b"\0"):
            try:
                while fh.write(chunk):
                    pass
            except OSError:
                pass


def _maybe_interrupt(settings: ToySettings, stage: str, step: int) -> None:
    if (settings.interrupt_file and settings.interrupt_stage == stage and step == settings.interrupt_step
            and Path(settings.interrupt_file).exists()):
        Path(settings.interrupt_file).unlink()
        raise KeyboardInterrupt


class ToyPlugin:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.seen_kwargs: dict[str, set[str]] = {}
        self.seen_trajectories: dict[str, list[str]] = {}
        self.seen_clusters: dict[str, object] = {}  # hook or factory -> the cluster it was given
        self.seen_versions: dict[int, tuple[int, list]] = {}  # step -> (engine version, trajectories' versions)
        self.in_flight_at_update: dict[int, bool] = {}  # step -> the next step's rollouts were being collected
        self.engines_built = 0

    def _note(self, name: str, ctx, **kwargs) -> ToySettings:
        self.calls.append(name)
        self.seen_kwargs[name] = set(kwargs) | {"ctx"}
        if "trajectories" in kwargs:
            self.seen_trajectories[name] = [t.id for t in kwargs["trajectories"]]
        settings = ctx.settings_for("toy", ToySettings)
        if settings.fail_in == name:
            if settings.fill_disk_at_failure:
                _fill_disk(Path(settings.fill_disk_at_failure))
            raise RuntimeError(f"toy failure in {name}")
        return settings

    @hookimpl
    def register_settings(self):
        return {"toy": ToySettings}

    @hookimpl
    def register_environments(self):
        return [EnvironmentSpec("toy", lambda ctx: ToyEnvironment(ctx.settings_for("toy", ToySettings)), "additions")]

    @hookimpl
    def register_rollout_engines(self):
        def build(ctx):
            self.engines_built += 1
            self.last_engine = ToyEngine(ctx.shared["toy.skill"], ctx.seed,
                                         ctx.settings_for("toy", ToySettings).generate_sleep_s)
            return self.last_engine
        return [EngineSpec("toy-engine", build, "a scripted engine whose skill grows")]

    @hookimpl
    def register_metrics(self):
        # How optimize's metrics are shown: its loss is the headline of an update (show, the report's plots).
        return [MetricSpec("loss", "1 - the engine's skill", role="update"),
                MetricSpec("skill", "the scripted engine's skill after the update")]

    @hookimpl
    def register_executors(self):
        def on_cluster(ctx, on_progress):
            self.seen_clusters["executor"] = ctx.cluster
            ctx.cluster.acquire()
            return SerialExecutor(on_progress)

        return [ExecutorSpec("toy-serial", lambda ctx, on_progress: SerialExecutor(on_progress), "one at a time"),
                ExecutorSpec("toy-clustered", on_cluster, "one at a time, on the toy cluster", cluster="toy-cluster")]

    @hookimpl
    def register_clusters(self):
        def build(config, settings):
            address = settings["toy"].cluster if "toy" in settings else None
            return ToyCluster(address) if address else None

        return [ClusterSpec("toy-cluster", build, "leases only", enable="set settings.toy.cluster: ADDRESS")]

    @hookimpl
    def check_config(self, config, settings, cluster):
        self.seen_clusters["check_config"] = cluster
        toy = settings.get("toy")  # absent when the recipe's toy section is invalid (reported already)
        if toy is not None and toy.needs_cluster and cluster is None:
            return [Issue("settings.toy.needs_cluster", "the toy needs its cluster", "set settings.toy.cluster")]
        return []

    @hookimpl
    def register_diagnosers(self):
        return [DiagnoserSpec("toy", "right or wrong", ("pass", "wrong_sum"))]

    @hookimpl
    def check_machine(self, config, settings, cluster):
        self.calls.append("check_machine")
        self.seen_kwargs["check_machine"] = {"config", "settings", "cluster"}
        self.seen_clusters["check_machine"] = cluster
        refuse = settings["toy"].refuse_machine
        return [refuse] if refuse else []

    @hookimpl
    def start_run(self, ctx, resumed):
        settings = self._note("start_run", ctx, resumed=resumed)
        ctx.shared["toy.skill"] = settings.start_skill

    @hookimpl
    def end_run(self, ctx, status):
        self.calls.append(f"end_run:{status}")

    @hookimpl
    def collect(self, ctx, environment, engine, tasks, interface, group_size, step):
        self._note("collect", ctx, environment=environment, engine=engine, tasks=tasks, interface=interface,
                   group_size=group_size, step=step)
        settings = ctx.settings_for("toy", ToySettings)
        jobs = [(i, t, g) for i, (t, g) in enumerate((t, g) for t in tasks for g in range(group_size))]

        def one(job):
            i, task, g = job
            if i < settings.infra_fail_first:
                raise InfraError("toy engine replica died")
            return _episode(engine, task, interface, f"{step}:{task.id}", g, False, settings.outcomes)

        def lost(job, reason):
            _, task, g = job
            return failed_trajectory(task, f"{step}:{task.id}", g, reason, interface.revision)

        return _spoil(ctx.executor.map(one, jobs, on_infra_failure=lost), settings.bad_data, False)

    @hookimpl
    def diagnose(self, ctx, environment, trajectories, step):
        self._note("diagnose", ctx, environment=environment, trajectories=trajectories, step=step)
        return [TurnLabel(trajectory_id=t.id, turn=0, label="pass" if t.success else "wrong_sum", source="toy")
                for t in trajectories]

    @hookimpl
    def evolve_interface(self, ctx, environment, interface, state, step):
        self._note("evolve_interface", ctx, environment=environment, interface=interface, state=state, step=step)
        if state.window.count("wrong_sum") >= 3 and interface.revision < 2:
            return Interface(revision=interface.revision + 1, parent=interface.revision,
                             system_text=interface.system_text + " Carry the ones.",
                             changes=["added a hint about carrying"], driven_by=["wrong_sum"])
        return None

    @hookimpl
    def reweight(self, ctx, trajectories, labels, state, step):
        self._note("reweight", ctx, trajectories=trajectories, labels=labels, state=state, step=step)
        wrong = {lab.trajectory_id for lab in labels if lab.label == "wrong_sum"}
        return ReweightResult(trajectory_weights={t.id: 1.5 if t.id in wrong else 1.0 for t in trajectories},
                              label_weights={"pass": 1.0, "wrong_sum": 1.5})

    @hookimpl
    def optimize(self, ctx, engine, trajectories, weights, step, rollouts):
        settings = self._note("optimize", ctx, engine=engine, trajectories=trajectories, weights=weights, step=step,
                              rollouts=rollouts)
        # The trajectories' policy versions as the update saw them (the staleness a real optimizer screens).
        self.seen_versions[step] = (engine.version, sorted({t.policy_version for t in trajectories}, key=str))
        self.in_flight_at_update[step] = rollouts.pending
        if settings.optimize_sleep_s and step >= settings.optimize_sleep_from_step:
            import time

            time.sleep(settings.optimize_sleep_s)
        _maybe_interrupt(settings, "optimize", step)
        rollouts.wait()  # the "weights" change below: no rollout may be sampling now
        engine.skill = min(1.0, engine.skill + settings.skill_step)
        engine.version += 1
        return {"loss": 1.0 - engine.skill, "skill": engine.skill}

    @hookimpl
    def evaluate(self, ctx, environment, engine, tasks, step, interface):
        settings = self._note("evaluate", ctx, environment=environment, engine=engine, tasks=tasks, step=step)
        _maybe_interrupt(settings, "evaluate", step)
        interface = interface or environment.pristine_interface()  # None: the pristine one (every scheduled point)
        trajs = [_episode(engine, t, interface, f"eval:{t.id}", 0, True) for t in tasks]
        if settings.bad_data and settings.bad_data != "eval_rate_7":  # a buggy environment's verified trajectories
            return _spoil(trajs, settings.bad_data, True)
        per_cat: dict[str, list[float]] = {}
        for t in trajs:
            per_cat.setdefault(t.category, []).append(t.reward)
        rates = {c: 100 * sum(v) / len(v) for c, v in per_cat.items()}
        if settings.bad_data == "eval_rate_7":
            rates = {c: 700.0 for c in rates}
        return EvalResult(split="eval", per_category=rates, n_tasks=len(trajs), trajectories=trajs)

    @hookimpl
    def save_checkpoint(self, ctx, directory, step):
        self.calls.append("save_checkpoint")
        if ctx.settings_for("toy", ToySettings).fail_in == "save_checkpoint":
            raise OSError(28, "No space left on device")
        engine = ctx.shared["engine"]
        (Path(directory) / "toy.json").write_text(
            json.dumps(
                {
                    "skill": engine.skill,
                    "rng": engine.rng.getstate()[1][:5],
                    "version": engine.version,
                    "rng_state": engine.rng.getstate(),
                }
            )
        )
        return {"toy": "skill"}

    @hookimpl
    def load_checkpoint(self, ctx, directory, step):
        self.calls.append("load_checkpoint")
        saved = json.loads((Path(directory) / "toy.json").read_text())
        engine = ctx.shared["engine"]
        engine.skill = saved["skill"]
        engine.version = saved.get("version", 0)
        if ctx.settings_for("toy", ToySettings).restore_rng:
            version, state, gauss = saved["rng_state"]
            engine.rng.setstate((version, tuple(state), gauss))


plugin = ToyPlugin()

# Entry points name a module or an object; `toy_plugin:plugin` registers the instance above.
