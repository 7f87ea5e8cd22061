"""The run's HTML report: its sections, read back from a short toy run, and the page rendered in a real browser
(headless Chromium; skipped when none is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.digest import load_digest
from seal_platform.html_report import run_report_html, write_run_report
from seal_platform.store import RunStore

REPO = Path(__file__).resolve().parents[2]
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture
def toy_run(toy_recipe, toy_site, tmp_path):
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=4", "--quiet"], terminal_width=200)
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ", 1)[1].split()[0]
    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    try:
        yield load_digest(store, run_id)
    finally:
        store.close()


def test_setup_and_evaluation_times_are_stored_per_step(toy_run):
    # Set-up once (step 0), and one time per evaluation: before training and every 2 steps (after 2 and 4).
    assert list(toy_run.stage_times["setup"]) == [0]
    assert sorted(toy_run.stage_times["evaluate"]) == sorted(p.step for p in next(iter(toy_run.evaluations.values())))
    stages = list(toy_run.stage_seconds())
    assert stages[0] == "setup" and "evaluate" in stages and "collect" in stages


def test_report_holds_every_section(toy_run):
    page = run_report_html(toy_run)
    for section in ("learning curve", "Optimizer metrics over steps", "Turn labels over steps",
                    "A-Patch label weights", "Interface revisions", "Stage timings", "Recipe"):
        assert section in page, section
    # The base line is the step-0 evaluation, and each evaluation's size is shown.
    base = next(p for p in next(iter(toy_run.evaluations.values())) if p.step == 0)
    assert f"base line (before training) {base.average:.1f}%" in page
    assert re.search(r"<td>tasks</td>(<td>6</td>)+</tr>", page)
    # The stage table names set-up and evaluation next to the loop's stages.
    timings = page.split("<h2>Stage timings</h2>", 1)[1]
    assert "<td>setup</td>" in timings and "<td>evaluate</td>" in timings
    # The resolved recipe, folded away, with the plugin settings the run used.
    details = page.split("<details>", 1)[1].split("</details>", 1)[0]
    assert "resolved recipe" in details and "n_tasks: 10" in details and "group_size: 2" in details
    # The toy optimizer's loss, one row per step that updated.
    optimizer = page.split("<h2>Optimizer metrics over steps</h2>", 1)[1].split("<h2>", 1)[0]
    assert optimizer.count("<tr>") == 1 + len(toy_run.steps) and "<th>loss</th>" in optimizer
    # Interface revisions carry their diffs.
    assert '<span class="add">' in page or '<span class="del">' in page


def test_steps_without_updates_are_listed_not_plotted_as_zeros(toy_run):
    digest = toy_run.model_copy(deep=True)
    digest.steps[1].metrics.update(updates=0.0)
    optimizer = run_report_html(digest).split("<h2>Optimizer metrics over steps</h2>", 1)[1].split("<h2>", 1)[0]
    assert optimizer.count("<tr>") == len(digest.steps)  # header + all steps but one
    assert f"steps without a policy update (nothing to learn or skipped): {digest.steps[1].step}" in optimizer


def _chromium(args: list[str], page: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         *args, page.as_uri()], capture_output=True, text=True, timeout=120)


def _console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (Debian: apt-get install chromium)")
def test_report_renders_in_chromium_without_console_errors(toy_run, tmp_path):
    # The check itself catches a console error (a page that has one is reported).
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>console.error('boom'); missing();</script></body></html>")
    assert len(_console_messages(_chromium(["--dump-dom"], broken).stderr)) == 2

    page = write_run_report(toy_run, tmp_path / "report.html")
    dom = _chromium(["--dump-dom"], page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console_messages(dom.stderr) == []
    assert dom.stdout.count("<img") >= 5 and "<details>" in dom.stdout
    shot = tmp_path / "report.png"
    taken = _chromium([f"--screenshot={shot}", "--window-size=1100,2400", "--hide-scrollbars"], page)
    assert taken.returncode == 0 and _console_messages(taken.stderr) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_charts_have_percent_axes_integer_steps_and_legends_outside_the_data(toy_run, monkeypatch):
    """Every chart as drawn (read back from the figures at save time): pass-rate axes span 0-100 %, step
    axes tick at whole numbers only, and no legend overlaps its plot area."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    seen: list[dict] = []
    save = Figure.savefig

    def recording_savefig(fig, *args, **kwargs):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            seen.append({
                "title": ax.get_title(), "ylim": ax.get_ylim(),
                "xticks": [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]],
                "overlap": legend is not None and legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)),
            })
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording_savefig)
    run_report_html(toy_run)
    titles = [s["title"] for s in seen]
    assert any(t.startswith("pass rate") for t in titles)
    assert "loss" in titles and any("labels" in t for t in titles)
    for chart in seen:
        assert all(float(t).is_integer() for t in chart["xticks"]), chart
        assert not chart["overlap"], chart
        if chart["title"].startswith("pass rate"):
            assert chart["ylim"] == (0.0, 100.0)
