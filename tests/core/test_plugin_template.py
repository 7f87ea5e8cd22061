"""examples/plugin-template, the folder a plugin author copies, keeps working: its plugin module (loaded by path
into a plugin manager, nothing installed) passes the platform's conformance check, and its own tests (the
conformance check again, its verifier through the hooks, one `seal-platform run` of its recipe) pass with the
template found through an entry point in a temporary site directory."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from seal_platform.conformance import PASS, check_environment
from seal_platform.plugins import make_plugin_manager

from .conftest import make_dist

TEMPLATE = Path(__file__).resolve().parents[2] / "examples" / "plugin-template"


def _template_plugin():
    spec = importlib.util.spec_from_file_location("template_plugin", TEMPLATE / "seal_myenv" / "plugin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_template_plugin_passes_every_conformance_check():
    host = make_plugin_manager(allow=[], extra=[("myenv", _template_plugin())])
    findings = check_environment("myenv", engine="myenv-scripted", host=host)
    checks = [f.check for f in findings]
    assert {"plan", "build", "protocol", "tasks(train)", "tasks(eval)", "pristine_interface", "engine", "collect",
            "evaluate", "trajectory ids", "lifecycle"} <= set(checks), checks
    assert [f for f in findings if f.status != PASS] == [], "\n".join(map(str, findings))


def test_the_template_s_own_tests_pass_with_it_found_through_its_entry_point(tmp_path):
    site = make_dist(tmp_path / "site", "seal-myenv", "0.1.0", {"myenv": "seal_myenv.plugin"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(TEMPLATE)])}
    env.pop("SEAL_PLATFORM_PLUGINS", None)
    env.pop("SEAL_PLATFORM_STORE", None)
    done = subprocess.run([sys.executable, "-m", "pytest", str(TEMPLATE / "tests"), "-p", "no:cacheprovider", "-q",
                           "-rs"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout and "skipped" not in done.stdout, done.stdout
