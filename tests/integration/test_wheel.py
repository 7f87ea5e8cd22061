"""The project builds into a wheel that carries everything a non-editable install needs: the core, the
default plugins under their installed name, the store migrations, and the shipped recipes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Source folder -> its name in the wheel (pyproject's [tool.setuptools.package-dir]).
INSTALLED_AS = {
    "seal_platform": "seal_platform",
    "seal_platform_libs": "seal_platform_libs",
    "plugins": "seal_platform_plugins",
    "recipes": "seal_platform_recipes",
}
SHIPPED = ("*.py", "*.json", "*.yaml", "*.ini", "*.mako", "py.typed")  # package-data's patterns, and the modules


def _source_files() -> list[str]:
    """The wheel paths of every file under the source folders that a non-editable install needs."""
    out = []
    for folder, name in INSTALLED_AS.items():
        for pattern in SHIPPED:
            for path in (ROOT / folder).rglob(pattern):
                if "__pycache__" not in path.parts:
                    out.append(f"{name}/{path.relative_to(ROOT / folder).as_posix()}")
    return out


def test_wheel_contains_recipes_and_finds_them_from_any_directory(tmp_path):
    # Built from a copy of the sources, so the build leaves nothing in the working tree.
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for part in INSTALLED_AS:
        shutil.copytree(ROOT / part, source / part, ignore=ignore)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w",
         str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("seal_platform-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    recipes = sorted(p.name for p in (ROOT / "recipes").glob("*.yaml"))
    assert recipes and {f"seal_platform_recipes/{r}" for r in recipes} <= names
    # Every source and data file of the packages, under its installed name (a sub-package missing from
    # pyproject's hand-written list would leave its modules out: seal_platform.present once was).
    missing = sorted(set(_source_files()) - names)
    assert not missing, f"not in the wheel (add the package to [tool.setuptools] packages): {missing}"
    assert not any(n.startswith(("tests/", "plugins/", "recipes/", "benchmarks/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "seal_platform_plugins.bfcl.plugin" in zipfile.ZipFile(wheel).read(entry_points).decode()

    # Installed from the wheel alone (not the source tree), from an unrelated directory: the default recipe,
    # and one that extends another, resolve inside the installed package.
    target = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                                str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = ("from seal_platform.config import resolve_recipe_path, load_recipe_data\n"
             "p = resolve_recipe_path(None); print(p); print(load_recipe_data(p)['name'])\n"
             "import seal_platform.present.summary, seal_platform.present.transcript_pairs\n"
             "import seal_platform; print(seal_platform.__file__)")
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONNOUSERSITE": "1"}
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r})\n{probe}"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    recipe_path, name, core = done.stdout.split()
    assert Path(recipe_path) == target / "seal_platform_recipes" / "smarthome-embedded.yaml"
    assert name == "smarthome-embedded" and Path(core).is_relative_to(target)
