"""The ray_backend plugin registers the `ray` executor through the entry-point group, and nothing imports Ray
until a run asks for it: loading every plugin and validating a Ray recipe leaves `ray` unimported."""

from __future__ import annotations

import subprocess
import sys

from seal_platform.plugins import make_plugin_manager


def test_the_ray_executor_is_registered():
    host = make_plugin_manager()
    assert host.executors()["ray"][0] == "ray_backend"


def test_loading_plugins_and_validating_a_ray_recipe_does_not_import_ray():
    code = (
        "import sys\n"
        "from seal_platform.cli import load_recipe, plugin_host_for\n"
        "from seal_platform.planning import check_recipe\n"
        "config, issues, _ = load_recipe('seal-ray', [])\n"
        "assert not issues, issues\n"
        "plan, issues = check_recipe(config, plugin_host_for(config))\n"
        "assert not issues, [str(i) for i in issues]\n"
        "assert plan.settings['ray'].enabled and config.rollout.executor == 'ray'\n"
        "print('ray' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_the_ray_cluster_is_what_the_recipe_enables_and_what_ray_parts_need():
    """``settings.ray.enabled`` makes the run's cluster the registered ``ray`` one (through the core's contract,
    no import of the plugin); the ``ray`` executor and grpo's replicas refuse a recipe without it, naming the
    key that turns it on."""
    from seal_platform.planning import recipe_problems
    from seal_platform.scaleout import cluster_for

    host = make_plugin_manager()
    assert host.clusters()["ray"][0] == "ray_backend"
    config, issues, _ = recipe_problems("seal-ray", [])
    assert not issues and config is not None
    cluster = cluster_for(host, config, {"ray": host.settings_models()["ray"](enabled=True, address="auto")})
    assert cluster is not None and cluster.name == "ray" and cluster.address == "auto"
    assert cluster_for(host, config, {}) is None  # settings.ray defaults: off

    _, issues, _ = recipe_problems("seal-ray", ["settings.ray.enabled=false"])
    where = {i.where: str(i) for i in issues}
    assert set(where) == {"rollout.executor", "settings.grpo.replicas"}, where
    assert "settings.ray.enabled: true" in where["rollout.executor"]
    assert "settings.ray.enabled: true" in where["settings.grpo.replicas"]


def test_old_ray_keys_name_their_new_place_in_config_validate():
    from click.testing import CliRunner

    from seal_platform.cli import cli

    result = CliRunner().invoke(cli, ["config", "validate", "seal-ray", "ray.address=auto", "rollout.replicas=2"])
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert "ray.address: this key moved to settings.ray.address" in text
    assert "rollout.replicas: this key moved to settings.grpo.replicas" in text


def test_a_resumed_run_may_join_another_cluster_and_change_nothing_else():
    """What `run --ray-address` did, generically: a resumed run takes overrides of the settings marked as where
    it runs (settings.ray.enabled / address / ...), and refuses any other."""
    import pytest

    from seal_platform.config import resume_overrides, runtime_keys
    from seal_platform.errors import ConfigError
    from seal_platform.planning import recipe_problems

    models = make_plugin_manager().settings_models()
    assert {"settings.ray.enabled", "settings.ray.address"} <= set(runtime_keys(models))
    config, _, _ = recipe_problems("seal-ray", [])
    assert config is not None
    moved = resume_overrides(config, ["settings.ray.address=ray://head:10001"], models)
    assert moved.settings["ray"]["address"] == "ray://head:10001" and moved.settings["ray"]["enabled"] is True
    assert moved.model_copy(update={"settings": config.settings}) == config  # nothing else changed
    with pytest.raises(ConfigError, match="only settings that say where it runs"):
        resume_overrides(config, ["settings.grpo.replicas=2"], models)
    with pytest.raises(ConfigError, match="only settings that say where it runs"):
        resume_overrides(config, ["training.steps=2"], models)
