"""Install the SQLite example's server, `mcp-server-sqlite` from PyPI, into its own virtual environment:

    python examples/mcp-sqlite/install_server.py      # prints the server's command (an absolute path)

The server is written against the MCP SDK 1.x (`mcp[cli]>=1.6`, no upper bound), while seal-platform's client
needs mcp >= 2.3: in one environment one of them breaks, so the server gets its own, with mcp pinned below 2
(the client and server still speak the same protocol over stdio). The environment is made once, under
``.cache/mcp-servers/sqlite`` of the current directory (or the folder given as the first argument), and reused
while its stamp names the same pins; the tests (tests/mcp_env/test_mcp_sqlite.py) call this too.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

PINS = ["mcp-server-sqlite==2025.4.25", "mcp[cli]>=1.6,<2"]
SCRIPT = "mcp-server-sqlite"


def install(folder: Path) -> Path:
    """The server's executable in ``folder`` (a virtual environment made there if it is not there yet)."""
    folder = folder.resolve()
    stamp = folder / ".installed"
    command = folder / "bin" / SCRIPT
    if stamp.is_file() and stamp.read_text() == "\n".join(PINS) and command.is_file():
        return command
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *PINS], check=True)
    stamp.write_text("\n".join(PINS))
    return command


if __name__ == "__main__":
    print(install(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".cache/mcp-servers/sqlite")))
