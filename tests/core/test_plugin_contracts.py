"""Plugin contracts the plugin manager enforces: implementations must match a spec (name and arguments), the
setup hooks go through pluggy, and a plugin that failed to load is named wherever it matters."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from seal_platform import hookimpl
from seal_platform.errors import ConfigError, PluginError
from seal_platform.planning import load_recipe, plan_config, plan_recipe
from seal_platform.plugins import make_plugin_manager
from seal_platform.registry import EnvironmentSpec

from .conftest import RAISING_REGISTRATION, diagnoser_source, make_dist


class Misspelt:
    @hookimpl
    def save_checkpoints(self, ctx, directory, step):  # the spec is save_checkpoint
        return {}

    @hookimpl
    def diagnose(self, trajectories):
        return []


class WrongArguments:
    @hookimpl
    def collect(self, ctx, batch):  # the spec has no `batch`
        return []


class Optional:
    @hookimpl(optionalhook=True)
    def my_own_extension_point(self):
        return 1

    @hookimpl
    def diagnose(self, trajectories):
        return []


def _record(host, name):
    return next(r for r in host.records if r.name == name)


def test_a_misspelt_hook_fails_its_plugin_with_the_reason(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    host = make_plugin_manager(allow=[], extra=[("typo", Misspelt()), ("fine", Optional())])
    typo = _record(host, "typo")
    assert typo.status == "failed"
    assert "'save_checkpoints' matches no hook spec (did you mean 'save_checkpoint'?)" in typo.error
    # Left out whole: none of its hooks is called, so a run never half-uses it.
    assert not host.is_loaded("typo") and not host.implements("typo", "diagnose")
    assert host.is_loaded("fine") and host.implements("fine", "diagnose")
    assert [r.name for r in host.failed()] == ["typo"]


def test_arguments_that_match_no_spec_fail_the_plugin(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    host = make_plugin_manager(allow=[], extra=[("wrong", WrongArguments())])
    wrong = _record(host, "wrong")
    assert wrong.status == "failed" and not host.is_loaded("wrong")
    assert "does not match its spec" in wrong.error and "batch" in wrong.error


def test_setup_hooks_are_called_through_pluggy(monkeypatch):
    import traceback

    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    callers = []

    class Provider:
        @hookimpl
        def register_environments(self):
            callers.append([frame.filename for frame in traceback.extract_stack()])
            return [EnvironmentSpec("bench", lambda ctx: None)]

    host = make_plugin_manager(allow=[], extra=[("provider", Provider())])
    assert host.environments()["bench"][0] == "provider"
    # Called once, when the manager was built, by pluggy (its caller is pluggy's, not the core calling the method).
    [stack] = callers
    assert "pluggy" in stack[-2]


def test_register_commands_adds_a_working_subcommand(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)

    class Commands:
        @hookimpl
        def register_commands(self, cli):
            @cli.command("hello")
            @click.argument("who")
            def hello(who):
                click.echo(f"hello {who}")

    host = make_plugin_manager(allow=[], extra=[("commands", Commands())])
    group = click.Group("seal-platform")
    host.hook.register_commands(cli=group)
    result = CliRunner().invoke(group, ["hello", "world"])
    assert result.exit_code == 0 and result.output == "hello world\n"


@pytest.fixture
def broken_site(toy_site, tmp_path, monkeypatch):
    make_dist(toy_site, "seal-kv", "0.1.0", {"kv": "kv_plugin"},
              {"kv_plugin.py": "raise ImportError('kv needs libkv, which is not installed')\n"})
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    return toy_site


def test_a_recipe_naming_what_a_failed_plugin_provides_gets_its_error(broken_site, toy_recipe):
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,kv]", "environment=kv", "settings.kv={}",
                                 "diagnosis.diagnosers=[kv]"])
    text = str(info.value)
    for where in ("environment:", "settings.kv:", "diagnosis.diagnosers:"):
        line = next(line for line in text.splitlines() if where in line)
        assert "'kv' (seal-kv): ImportError: kv needs libkv" in line, line


def test_environment_and_diagnoser_names_are_not_plugin_names(broken_site, toy_recipe):
    config, issues, path = load_recipe(toy_recipe, ["plugins.allow=[toy,kv]"])
    assert not issues
    # The recipe names an environment, an engine and diagnosers, none of them a plugin it requires by name.
    assert config.named_plugins() == {"toy"}
    plan = plan_config(config, str(path))
    assert plan.primary_diagnoser == "toy" and plan.diagnosers == ["toy"]


def test_every_run_names_the_plugins_that_failed_to_load(broken_site, toy_recipe):
    from seal_platform.cli import cli

    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=1", "plugins.allow=[toy,kv]", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "warning: plugin 'kv' (seal-kv) was not loaded: ImportError: kv needs libkv" in result.output
    # config validate names it too, whether the recipe is valid or not (a failed plugin may be why it is not).
    for extra, code in (([], 0), (["training.steps=-3"], 1)):
        result = CliRunner().invoke(cli, ["config", "validate", str(toy_recipe), "plugins.allow=[toy,kv]", *extra])
        assert result.exit_code == code, result.output
        assert "warning: plugin 'kv' (seal-kv) was not loaded: ImportError: kv needs libkv" in result.output


def test_a_plugin_whose_registration_raises_is_skipped_unless_the_recipe_needs_it(toy_site, toy_recipe, monkeypatch):
    from seal_platform.cli import cli

    make_dist(toy_site, "seal-badreg", "0.1.0", {"badreg": "badreg_plugin"}, {"badreg_plugin.py": RAISING_REGISTRATION})
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    # A recipe that does not need it plans (and runs) without it; the run names it with its error.
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,badreg]"])
    assert plan.host is not None and not plan.host.is_loaded("badreg")
    assert _record(plan.host, "badreg").status == "failed"
    result = CliRunner().invoke(
        cli, ["run", str(toy_recipe), "training.steps=1", "plugins.allow=[toy,badreg]", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert "warning: plugin 'badreg' (seal-badreg) was not loaded: register_environments raised RuntimeError: " \
        "boom in register_environments" in result.output
    # One that names it gets why it is unavailable.
    with pytest.raises(PluginError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,badreg]", "stages.optimize=badreg"])
    assert "the recipe depends on plugin 'badreg', which failed to load: register_environments raised " \
        "RuntimeError: boom in register_environments" in str(info.value)
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,badreg]", "environment=bad"])
    assert "'badreg' (seal-badreg): register_environments raised RuntimeError" in str(info.value)
    # verify loads every plugin, as every command does: it scores, and says on stderr which plugin did not
    # load (stdout stays the results), with a --set section of another plugin too.
    data = toy_recipe.parent / "in.jsonl"
    data.write_text('{"task_id": "a", "answer": 42}\n')
    result = CliRunner().invoke(cli, ["verify", "--benchmark", "toy", str(data)])
    assert result.exit_code == 0 and result.stdout.strip() == '{"task_id": "a", "success": true}', result.output
    assert "warning: plugin 'badreg' (seal-badreg) was not loaded" in result.stderr
    result = CliRunner().invoke(cli, ["verify", "--benchmark", "toy", "--set", "bfcl.limit_per_category=1", str(data)])
    assert result.exit_code == 0 and result.stdout.strip() == '{"task_id": "a", "success": true}', result.output
    assert "warning: plugin 'badreg' (seal-badreg) was not loaded" in result.stderr


OTHER_DIAGNOSERS = '''
from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec


@hookimpl
def register_diagnosers():
    return [DiagnoserSpec("elsewhere", environments=("not-toy",)), DiagnoserSpec("control", explicit=True),
            DiagnoserSpec("anywhere")]


@hookimpl
def diagnose(ctx, trajectories):
    return []
'''


@pytest.fixture
def other_site(toy_site, monkeypatch):
    make_dist(toy_site, "seal-other", "0.1.0", {"other": "other_plugin"}, {"other_plugin.py": OTHER_DIAGNOSERS})
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    return toy_site


def test_the_core_enables_diagnosers_by_environment_and_passes_the_list(other_site, toy_recipe, tmp_path):
    from seal_platform.loop import Runner
    from seal_platform.store import RunStore

    # Default (null): every diagnoser but the explicit ones, of those that label the run's environment.
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,other]"])
    assert plan.diagnoser_names == ["anywhere", "toy"] and plan.diagnosers == ["other", "toy"]
    assert plan.primary_diagnoser == "toy"
    # Named: an explicit one runs.
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,other]", "diagnosis.diagnosers=[toy,control]"])
    assert plan.diagnoser_names == ["toy", "control"] and plan.primary_diagnoser == "toy"
    # Plugins read the list from the run context the core builds.
    assert plan.host is not None
    runner = Runner(plan, plan.host, RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}"))
    assert runner.ctx.diagnosers == ["toy", "control"]
    runner.ctx.executor.close()
    # Named diagnosers for other environments only, with stages that need no labels: nothing to run.
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,other]", "diagnosis.diagnosers=[]",
                                    "stages.evolve_interface=null", "stages.reweight=null"])
    assert plan.diagnoser_names == [] and plan.diagnosers == [] and plan.primary_diagnoser is None


@pytest.mark.parametrize("named", ["[elsewhere,toy,control]", "[elsewhere]"])
def test_a_named_diagnoser_that_does_not_label_the_environment_is_a_recipe_problem(other_site, toy_recipe, named):
    # It used to be left out without a word: `config validate` said ok and the run got none of its labels.
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,other]", f"diagnosis.diagnosers={named}"])
    problems = [line for line in str(info.value).splitlines() if "diagnosis.diagnosers" in line]
    assert len(problems) == 1, problems  # said once: not also as "no enabled diagnoser labels"
    assert "diagnoser 'elsewhere' does not label environment 'toy' (it labels: not-toy (registered by no loaded " \
        "plugin); registered by plugin 'other')" in problems[0]
    assert "remove it from diagnosis.diagnosers" in problems[0] and "seal-platform labels toy" in problems[0]
    # `config validate` reports it as the run would.
    from seal_platform.cli import cli

    result = CliRunner().invoke(cli, ["config", "validate", str(toy_recipe), "plugins.allow=[toy,other]",
                                      f"diagnosis.diagnosers={named}"])
    assert result.exit_code != 0 and "diagnoser 'elsewhere' does not label environment 'toy'" in result.output


class _Library:
    """An environment plugin whose one diagnoser's DiagnoserSpec misspells its environment ("libary")."""

    def __init__(self, environments: tuple[str, ...] = ("libary",)) -> None:
        self.environments = environments

    @hookimpl
    def register_environments(self):
        return [EnvironmentSpec("library", lambda ctx: None)]

    @hookimpl
    def register_rollout_engines(self):
        from seal_platform.registry import EngineSpec

        return [EngineSpec("oracle", lambda ctx: None)]

    @hookimpl
    def register_diagnosers(self):
        from seal_platform.registry import DiagnoserSpec

        return [DiagnoserSpec("library", environments=self.environments)]

    @hookimpl
    def collect(self, ctx):
        return []

    @hookimpl
    def evaluate(self, ctx):
        return []

    @hookimpl
    def diagnose(self, ctx):
        return []

    @hookimpl
    def evolve_interface(self, ctx):
        return None

    @hookimpl
    def reweight(self, ctx):
        return None


def _library_problems(overrides: dict, environments: tuple[str, ...] = ("libary",)) -> list[str]:
    from seal_platform.config import validate_core
    from seal_platform.planning import check_recipe

    recipe = {"environment": "library", "rollout": {"engine": "oracle"},
              "stages": {"evolve_interface": "library", "reweight": "library", "optimize": None}, **overrides}
    config, issues = validate_core(recipe)
    assert config is not None, issues
    host = make_plugin_manager(entry_points=[], extra=[("library", _Library(environments))])
    return [str(issue) for issue in check_recipe(config, host)[1]]


def test_no_diagnoser_labelling_the_environment_is_a_problem_for_stages_that_need_labels():
    # A typo in DiagnoserSpec(environments=...): the only diagnoser enabled by default labels no run at all,
    # and interface evolution and A-Patch would get no labels, without a word.
    [problem] = _library_problems({})
    assert problem.startswith("diagnosis.diagnosers: no enabled diagnoser labels environment 'library', so "
                              "stages.evolve_interface and stages.reweight would have no labels to work from")
    assert "library (plugin 'library') labels only libary (registered by no loaded plugin; 'library' meant?)" in problem
    assert "stages.evolve_interface: null, stages.reweight: null" in problem
    # None enabled while A-Patch needs labels: the same problem.
    [problem] = _library_problems({"diagnosis": {"diagnosers": []}, "stages": {"reweight": "library"}})
    assert "no enabled diagnoser labels environment 'library', so stages.reweight would have" in problem
    # No stage needs labels: left out quietly, as one enabled by default is; spelt right: it labels the run.
    assert _library_problems({"stages": {}}) == []
    assert _library_problems({}, environments=("library",)) == []


# --- what a plugin returns from a hook is checked, and a plugin that raises is named ---------------------------


def _install(site, name: str, source: str, monkeypatch) -> None:
    """Install plugin ``name`` (module ``<name>_plugin`` from ``source``) next to the toy plugin."""
    import sys

    make_dist(site, f"seal-{name}", "0.1.0", {name: f"{name}_plugin"}, {f"{name}_plugin.py": source})
    sys.modules.pop(f"{name}_plugin", None)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)


def _run(plan, tmp_path):
    from seal_platform.loop import run_plan
    from seal_platform.store import RunStore

    return run_plan(plan, RunStore(f"sqlite:///{tmp_path / 'contract-store.sqlite'}"))


CHECK_CONFIG_RAISES = '''
from seal_platform import hookimpl


@hookimpl
def check_config(config, settings, cluster):
    raise RuntimeError("boom in check_config")
'''

CHECK_CONFIG_STRINGS = '''
from seal_platform import hookimpl


@hookimpl
def check_config(config, settings, cluster):
    return ["the cluster is too small"]
'''


@pytest.mark.parametrize(
    "source, said",
    [
        (CHECK_CONFIG_RAISES, "failed in 'check_config': RuntimeError: boom in check_config"),
        (CHECK_CONFIG_STRINGS, "returned ['the cluster is too small'] from 'check_config'"),
    ],
)
def test_a_broken_check_config_is_one_recipe_problem_naming_its_plugin(toy_site, toy_recipe, monkeypatch, source, said):
    from seal_platform.cli import cli

    _install(toy_site, "badcheck", source, monkeypatch)
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,badcheck]"])
    assert f"plugin 'badcheck' {said}" in str(info.value)
    # config validate lists it with the recipe's other problems; run refuses the recipe.
    result = CliRunner().invoke(cli, ["config", "validate", str(toy_recipe), "plugins.allow=[toy,badcheck]",
                                      "training.steps=-3"])
    assert result.exit_code == 1, result.output
    assert f"plugin 'badcheck' {said}" in result.output and "training.steps" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "plugins.allow=[toy,badcheck]", "--quiet"])
    assert result.exit_code != 0 and f"plugin 'badcheck' {said}" in result.output
    assert "Traceback" not in result.output


CHECK_MACHINE_RAISES = '''
from seal_platform import hookimpl


@hookimpl
def check_machine(config, settings, cluster):
    raise RuntimeError("boom in check_machine")
'''

CHECK_MACHINE_STRING = '''
from seal_platform import hookimpl


@hookimpl
def check_machine(config, settings, cluster):
    return "no GPU"
'''


@pytest.mark.parametrize(
    "source, said",
    [
        (CHECK_MACHINE_RAISES, "failed in 'check_machine': RuntimeError: boom in check_machine"),
        (CHECK_MACHINE_STRING, "returned 'no GPU' from 'check_machine', not a list of strings"),
    ],
)
def test_a_broken_check_machine_stops_the_run_naming_its_plugin(toy_site, toy_recipe, monkeypatch, source, said):
    from seal_platform.cli import cli

    _install(toy_site, "badmachine", source, monkeypatch)
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "plugins.allow=[toy,badmachine]", "--quiet"])
    assert result.exit_code == 2, result.output
    assert "nothing was started" in result.output and f"plugin 'badmachine' {said}" in result.output
    assert "- n\n" not in result.output and "Traceback" not in result.output


OPTIMIZER = '''
from seal_platform import hookimpl


@hookimpl
def optimize(ctx, engine, trajectories, weights, step):
    return RESULT
'''


@pytest.mark.parametrize(
    "result, said",
    [
        ('"loss=1"', "must return a dict of metric name -> float (or None) from 'optimize', not str"),
        ('{"loss": "abc"}', "returned metrics from 'optimize' that are not a flat dict of name -> float ('loss': str)"),
    ],
)
def test_an_optimizer_returning_no_flat_dict_of_floats_fails_naming_it(
    toy_site, toy_recipe, monkeypatch, tmp_path, result, said
):
    from seal_platform.store import RunStore

    _install(toy_site, "badopt", OPTIMIZER.replace("RESULT", result), monkeypatch)
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,badopt]", "stages.optimize=badopt", "training.steps=1"])
    with pytest.raises(PluginError) as info:
        _run(plan, tmp_path)
    assert f"plugin 'badopt' {said}" in str(info.value)
    store = RunStore(f"sqlite:///{tmp_path / 'contract-store.sqlite'}")
    [run] = store.list_runs()
    assert store.steps(run.id) == []  # nothing of it is stored


BAD_ENVIRONMENT = '''
from seal_platform import hookimpl
from seal_platform.registry import EnvironmentSpec

import toy_plugin


class Pristine(toy_plugin.ToyEnvironment):
    def pristine_interface(self):
        return {"system_text": "not an Interface"}


@hookimpl
def register_environments():
    return [EnvironmentSpec("badenv", lambda ctx: Pristine(ctx.settings_for("toy", toy_plugin.ToySettings)))]


@hookimpl
def collect(ctx, environment, engine, tasks, interface, group_size, step):
    return toy_plugin.plugin.collect(ctx, environment, engine, tasks, interface, group_size, step)


@hookimpl
def evaluate(ctx, environment, engine, tasks, step):
    return toy_plugin.plugin.evaluate(ctx, environment, engine, tasks, step, None)
'''


def test_a_pristine_interface_that_is_not_an_interface_fails_naming_the_plugin(
    toy_site, toy_recipe, monkeypatch, tmp_path
):
    _install(toy_site, "badenv", BAD_ENVIRONMENT, monkeypatch)
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,badenv]", "environment=badenv", "training.steps=1"])
    with pytest.raises(PluginError) as info:
        _run(plan, tmp_path)
    assert "plugin 'badenv': its environment's pristine_interface() returned dict, not an Interface" in str(info.value)


@pytest.mark.parametrize(
    "result, said",
    [
        (
            'raise RuntimeError("boom in diagnose")',
            "the 'diagnose' stage failed in plugin 'multi': RuntimeError: boom in diagnose",
        ),
        ('return "ok"', "plugin 'multi' must return a list of TurnLabel from 'diagnose', not str"),
        ('return {"labels": []}', "plugin 'multi' must return a list of TurnLabel from 'diagnose', not dict"),
        ('return None', "plugin 'multi' returned None from 'diagnose' for the "),
        ('pass', "plugin 'multi' returned None from 'diagnose' for the "),
        (
            'return [label(t, source="toy") for t in trajectories]',
            "whose source is not a diagnoser it registers (multi)",
        ),
        (
            'return [label(t, trajectory_id="nope") for t in trajectories]',
            "for a trajectory that is not one of the step's",
        ),
        ('return [label(t, turn=99) for t in trajectories]', "for a turn the trajectory does not have"),
        ('return [label(t, turn=-1) for t in trajectories]', "for a turn the trajectory does not have"),
    ],
)
def test_a_diagnoser_is_called_on_its_own_and_its_labels_are_checked(toy_site, toy_recipe, monkeypatch, tmp_path,
                                                                     result, said):
    from seal_platform.store import RunStore

    _install(toy_site, "multi", diagnoser_source(result), monkeypatch)
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,multi]", "training.steps=1"])
    assert plan.diagnosers == ["multi", "toy"]
    with pytest.raises(PluginError) as info:
        _run(plan, tmp_path)
    text = str(info.value)
    assert said in text and "multi,toy" not in text and "toy,multi" not in text
    if "label(" in result:
        assert text.startswith("plugin 'multi' returned a label from 'diagnose'")
    store = RunStore(f"sqlite:///{tmp_path / 'contract-store.sqlite'}")
    [run] = store.list_runs()
    assert store.steps(run.id) == []  # nothing of it is stored


def test_labels_of_a_good_diagnoser_beside_another_are_all_kept(toy_site, toy_recipe, monkeypatch, tmp_path):
    from seal_platform.store import RunStore

    _install(toy_site, "multi", diagnoser_source(), monkeypatch)
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,multi]", "training.steps=1"])
    _run(plan, tmp_path)
    store = RunStore(f"sqlite:///{tmp_path / 'contract-store.sqlite'}")
    [run] = store.list_runs()
    sources = {lab.source for lab in store.labels(run.id)}
    assert sources == {"multi", "toy"}


def test_a_primary_diagnoser_that_does_not_label_the_environment_is_a_recipe_problem(other_site, toy_recipe):
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,other]", "diagnosis.diagnosers=[elsewhere,toy]",
                                 "diagnosis.primary=elsewhere"])
    line = next(line for line in str(info.value).splitlines() if "diagnosis.primary" in line)
    assert "diagnoser 'elsewhere' does not label environment 'toy'" in line
    assert plan_recipe(toy_recipe, ["plugins.allow=[toy,other]", "diagnosis.diagnosers=[anywhere,toy]",
                                    "diagnosis.primary=anywhere"]).primary_diagnoser == "anywhere"


COUNTING_ENVIRONMENT = '''
from seal_platform import hookimpl
from seal_platform.registry import EnvironmentSpec

import toy_plugin


@hookimpl
def register_environments():
    return [EnvironmentSpec(
        "counting", lambda ctx: toy_plugin.ToyEnvironment(ctx.settings_for("toy", toy_plugin.ToySettings))
    )]


@hookimpl
def collect(ctx, environment, engine, tasks, interface, group_size, step):
    return toy_plugin.plugin.collect(ctx, environment, engine, tasks, interface, group_size, step)SLICE


@hookimpl
def evaluate(ctx, environment, engine, tasks, step):
    return toy_plugin.plugin.evaluate(ctx, environment, engine, tasks, step, None)
'''


@pytest.mark.parametrize("extra, count", [("[:-1]", 7), (" * 2", 16)])
def test_collect_must_return_one_trajectory_per_task_and_sample(
    toy_site, toy_recipe, monkeypatch, tmp_path, extra, count
):
    _install(toy_site, "counting", COUNTING_ENVIRONMENT.replace("SLICE", extra), monkeypatch)
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,counting]", "environment=counting", "training.steps=1"])
    with pytest.raises(PluginError) as info:
        _run(plan, tmp_path)
    assert f"plugin 'counting' returned {count} trajectories from 'collect' for 4 task(s) x group_size 2; it must " \
        "return 8" in str(info.value)


class Wrapping:
    """Lifecycle hooks written as pluggy wrappers, new style and old style."""

    def __init__(self):
        self.calls = []

    @hookimpl(wrapper=True)
    def start_run(self, ctx, resumed):
        self.calls.append("start_run")
        return (yield)

    @hookimpl(hookwrapper=True)
    def end_run(self, ctx, status):
        self.calls.append(f"end_run:{status}")
        yield

    @hookimpl(wrapper=True)
    def save_checkpoint(self, ctx, directory, step):
        self.calls.append("save_checkpoint")
        yield
        return {"saved": step}

    @hookimpl(wrapper=True)
    def load_checkpoint(self, ctx, directory, step):
        self.calls.append("load_checkpoint")
        return (yield)


class Plain:
    @hookimpl
    def save_checkpoint(self, ctx, directory, step):
        return {"plain": step}


def test_lifecycle_hooks_written_as_pluggy_wrappers_run(monkeypatch, tmp_path):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    wrapping = Wrapping()
    host = make_plugin_manager(allow=[], extra=[("plain", Plain()), ("wrapping", wrapping)])
    host.call_each("start_run", ctx=None, resumed=False)
    metas = host.call_each("save_checkpoint", ctx=None, directory=tmp_path, step=3)
    host.call_each("load_checkpoint", ctx=None, directory=tmp_path, step=3)
    host.call_each("end_run", ctx=None, status="completed")
    assert wrapping.calls == ["start_run", "save_checkpoint", "load_checkpoint", "end_run:completed"]
    assert {"saved": 3} in metas and {"plain": 3} in metas
