"""``check_environment`` / ``seal-platform check-env``: an environment plugin's contract, checked before a run.

A shipped environment with its scripted engine passes every check; deliberately broken environments fail the
check that names their mistake (and only the checks that follow from it)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.conformance import Finding, check_environment, report_lines
from seal_platform.hookspecs import hookimpl
from seal_platform.plugins import make_plugin_manager
from seal_platform.registry import EngineSpec, EnvironmentSpec
from seal_platform.types import Generation, Interface, Task, Trajectory

KVSTORE_RECIPE = "examples/seal-kvstore/recipe.yaml"


def _kvstore_installed() -> bool:
    return "kvstore" in make_plugin_manager().environments()


needs_kvstore = pytest.mark.skipif(not _kvstore_installed(), reason="the seal-kvstore example is not installed "
                                   "(pip install -e examples/seal-kvstore; `make install` does)")


def _by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def _failed(findings: list[Finding]) -> list[str]:
    return [f.check for f in findings if f.failed]


# --- a shipped environment ----------------------------------------------------------------------------


@needs_kvstore
def test_the_kvstore_example_with_its_scripted_engine_passes_every_check():
    findings = check_environment("kvstore", engine="kv-oracle", tasks=3)
    assert _failed(findings) == [], "\n".join(map(str, findings))
    checks = _by_check(findings)
    for check in ("plan", "build", "protocol", "tasks(train)", "tasks(eval)", "pristine_interface", "engine",
                  "collect", "evaluate", "trajectory ids", "lifecycle"):
        assert checks[check].passed, checks[check]
    assert "3 task(s) x group_size 2 -> 6" in checks["collect"].message
    assert checks["verify_record"].status == "SKIP"  # no generic record: the environment's own shape
    assert all(len(line) <= 80 for line in report_lines(findings))


@needs_kvstore
def test_a_recipe_and_overrides_set_what_the_environment_is_checked_with():
    findings = check_environment("kvstore", recipe=KVSTORE_RECIPE, overrides=["training.group_size=3"],
                                 engine="kv-oracle", tasks=1)
    assert _failed(findings) == [], "\n".join(map(str, findings))
    assert "1 task(s) x group_size 3 -> 3" in _by_check(findings)["collect"].message


@needs_kvstore
def test_without_an_engine_no_episode_is_run():
    findings = check_environment("kvstore")
    checks = _by_check(findings)
    assert _failed(findings) == [] and checks["episodes"].status == "SKIP"
    assert "collect" not in checks and "engine" not in checks


# --- broken environments --------------------------------------------------------------------------------


class _NamelessEnv:
    """An environment as the README once described it: tasks and pristine_interface, no ``name``."""

    def __init__(self, fault: str):
        self.fault = fault

    def tasks(self, split: str) -> list[Task]:
        ids = ["t0", "t0", "t1"] if self.fault == "duplicate_task_ids" and split == "train" else ["t0", "t1", "t2"]
        return [Task(id=f"{split}-{i}", category="c", split=split) for i in ids]

    def pristine_interface(self) -> Interface:
        if self.fault == "unstable_interface":
            self.calls = getattr(self, "calls", 0) + 1
            return Interface(system_text=f"call {self.calls}")
        return Interface(system_text="Answer.")


class _Env(_NamelessEnv):
    name = "broken"


class _Engine:
    name = "broken-engine"

    def generate(self, conversations, sampling):
        return [Generation(text="ok") for _ in conversations]


def _trajectory(task: Task, group: str, sample: int, **fields) -> Trajectory:
    return Trajectory(task_id=task.id, category=task.category, group=group, sample=sample, reward=1.0, **fields)


class Broken:
    """An environment plugin with one mistake (``fault``), and a scripted engine."""

    def __init__(self, fault: str = ""):
        self.fault = fault

    @hookimpl
    def register_environments(self):
        make = _NamelessEnv if self.fault == "no_name" else _Env
        return [EnvironmentSpec("broken", lambda ctx: make(self.fault), "an environment with one mistake")]

    @hookimpl
    def register_rollout_engines(self):
        return [EngineSpec("broken-engine", lambda ctx: _Engine(), "scripted")]

    @hookimpl
    def start_run(self, ctx, resumed):
        if self.fault == "start_run":
            raise RuntimeError("no licence for the simulator")

    @hookimpl
    def collect(self, ctx, environment, engine, tasks, interface, group_size, step):
        out = [_trajectory(task, f"{step}:{task.id}", j) for task in tasks for j in range(group_size)]
        if self.fault == "task_sample_ids":  # unique in a call, repeated in the next step's
            for t in out:
                t.id = f"{t.task_id}:{t.sample}"
        elif self.fault == "nan_reward":
            out[0].reward = float("nan")
        elif self.fault == "stray_task":
            out[0].task_id = "not-given"
        elif self.fault == "one_group":
            for t in out:
                t.group = str(step)
        return out

    @hookimpl
    def evaluate(self, ctx, environment, engine, tasks, step):
        if self.fault == "eval_empty":
            return []
        return [_trajectory(task, f"eval{step}:{task.id}", 0) for task in tasks]


def _check(fault: str, **options) -> list[Finding]:
    host = make_plugin_manager(allow=[], extra=[("broken", Broken(fault))])
    return check_environment("broken", engine="broken-engine", host=host, **options)


def test_a_correct_environment_of_the_same_plugin_passes():
    findings = _check("")
    assert _failed(findings) == [], "\n".join(map(str, findings))


def test_an_environment_without_name_fails_the_protocol_check_naming_it():
    findings = _check("no_name")
    assert _failed(findings) == ["protocol"]
    message = _by_check(findings)["protocol"].message
    assert "no `name` attribute" in message and "_NamelessEnv" in message


def test_tasks_with_duplicate_ids_fail_the_tasks_check_of_that_split():
    findings = _check("duplicate_task_ids")
    checks = _by_check(findings)
    assert "tasks(train)" in _failed(findings) and checks["tasks(eval)"].passed
    assert "duplicate ids ['train-t0']" in checks["tasks(train)"].message
    assert checks["episodes"].status == "SKIP"  # no training tasks to collect on


def test_evaluate_returning_nothing_fails_the_evaluate_check():
    findings = _check("eval_empty")
    assert _failed(findings) == ["evaluate"]
    assert "returned 0 trajectories for 2 task(s)" in _by_check(findings)["evaluate"].message


def test_ids_that_repeat_in_the_next_step_fail_the_trajectory_ids_check():
    findings = _check("task_sample_ids")
    assert _failed(findings) == ["trajectory ids"]
    message = _by_check(findings)["trajectory ids"].message
    assert "'train-t0:0' (collect at step 0 and collect at step 1)" in message


@pytest.mark.parametrize("fault, said", [
    ("nan_reward", "not a finite number"),
    ("stray_task", "'not-given'], which it was not given"),
    ("one_group", "hold the rollouts of several tasks"),
])
def test_wrong_collected_trajectories_fail_the_collect_check(fault, said):
    findings = _check(fault)
    assert _failed(findings) == ["collect"]
    assert said in _by_check(findings)["collect"].message


def test_an_unstable_pristine_interface_fails_its_check():
    findings = _check("unstable_interface")
    assert _failed(findings) == ["pristine_interface"]


def test_a_failing_start_run_fails_the_lifecycle_check():
    findings = _check("start_run")
    assert [(f.check, f.status) for f in findings] == [("plan", "PASS"), ("lifecycle", "FAIL")]
    assert "no licence for the simulator" in findings[1].message


def test_an_environment_no_plugin_registers_fails_the_plan_check():
    host = make_plugin_manager(allow=[], extra=[("broken", Broken())])
    findings = check_environment("brokn", host=host)
    assert [f.check for f in findings] == ["plan"] and findings[0].failed
    assert "'broken'" in findings[0].message  # the registered name it most likely misspells


# --- the command ----------------------------------------------------------------------------------------


@needs_kvstore
def test_check_env_exits_0_when_every_check_passes_1_when_one_fails_2_for_a_usage_error():
    runner = CliRunner()
    ok = runner.invoke(cli, ["check-env", "kvstore", "--engine", "kv-oracle", "--tasks", "1"])
    assert ok.exit_code == 0, ok.output
    lines = ok.output.splitlines()
    assert lines[0].startswith("PASS  plan:") and any(line.startswith("PASS  collect:") for line in lines)
    assert all(len(line) <= 80 for line in lines)

    bad = runner.invoke(cli, ["check-env", "kvstore", KVSTORE_RECIPE, "evaluation.split=nosuch",
                              "--engine", "kv-oracle"])
    assert bad.exit_code == 1, bad.output
    assert any(line.startswith("FAIL  tasks(nosuch):") for line in bad.output.splitlines())

    assert runner.invoke(cli, ["check-env"]).exit_code == 2  # no NAME
    assert runner.invoke(cli, ["check-env", "kvstore", "--tasks", "0"]).exit_code == 2
    assert runner.invoke(cli, ["check-env", "kvstore", "training.steps=oops"]).exit_code == 2  # a bad core key
