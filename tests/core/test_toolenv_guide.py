"""The plugin guide's example of a third-party environment built on ``seal_platform.toolenv`` runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "write-an-environment-plugin.md"


def test_the_guides_toolenv_example_runs_as_written(tmp_path: Path) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## 12. Reusing the tool-environment library", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2, "section 12 should hold the example and the block that exercises it"
    assert "evolve(" in blocks[1] and "assert" in blocks[1]
    script = tmp_path / "guide_example.py"
    script.write_text("\n".join(blocks) + "\nprint('guide example ran')\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "guide example ran"
