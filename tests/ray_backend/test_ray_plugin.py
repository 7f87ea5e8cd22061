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
        "assert config.ray.enabled and config.rollout.executor == 'ray'\n"
        "print('ray' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
