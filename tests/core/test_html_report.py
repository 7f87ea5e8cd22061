"""The run's HTML report: its sections, read back from a short toy run, and the page rendered in a real browser
(headless Chromium; skipped when none is installed)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.present.digest import load_digest
from seal_platform.present.html_report import run_report_html, write_run_report
from seal_platform.present.transcripts import report_transcripts
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
    from seal_platform.present.metrics import MetricCatalog
    from seal_platform.registry import MetricSpec

    digest = toy_run.model_copy(deep=True)
    digest.steps[1].metrics.update(updates=0.0)
    # The toy optimizer's loss, and a count of updates declared as such here (whatever plugins are installed).
    catalog = MetricCatalog([MetricSpec("loss", role="update"), MetricSpec("updates", role="updates")])
    page = run_report_html(digest, catalog=catalog)
    optimizer = page.split("<h2>Optimizer metrics over steps</h2>", 1)[1].split("<h2>", 1)[0]
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

    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    page = write_run_report(toy_run, tmp_path / "report.html", transcripts=report_transcripts(store, toy_run.id))
    store.close()
    dom = _chromium(["--dump-dom"], page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console_messages(dom.stderr) == []
    assert dom.stdout.count("<img") >= 5 and "<details>" in dom.stdout and 'id="transcripts-eval-0"' in dom.stdout
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
            seen.append(
                {
                    "title": ax.get_title(),
                    "ylim": ax.get_ylim(),
                    "xticks": [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]],
                    "overlap": legend is not None
                    and legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)),
                }
            )
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
            # 0-100 % whatever the run did, with a margin so a line at 0 % or 100 % is not hidden in the frame
            low, high = chart["ylim"]
            assert -10 < low < 0 and 100 < high < 110


def test_report_links_every_evaluation_and_training_step_to_its_transcripts(toy_run, tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    try:
        sample = report_transcripts(store, toy_run.id)
        page = run_report_html(toy_run, sample)
        evals = {p.step for p in next(iter(toy_run.evaluations.values()))}
        assert {b.step for b in sample if b.phase == "eval"} == evals
        assert {b.step for b in sample if b.phase == "train"} == {s.step for s in toy_run.steps}
        for block in sample:
            # Each block is in the page and linked from the tables (the evaluation table's columns, the
            # per-step table's rows).
            assert f'<h3 id="{block.anchor}">' in page and page.count(f'href="#{block.anchor}"') >= 1
            stored = store.trajectories(toy_run.id, step=block.step, phase=block.phase)
            assert block.total == len(stored) and block.failed == sum(not t.success for t in stored)
            if block.phase == "eval":  # every episode of the evaluation (6 tasks), failed ones first
                assert len(block.episodes) == len(stored)
                rewards = [e.reward > 0.5 for e in block.episodes]
                assert rewards == sorted(rewards)
            else:  # one group: all its samples
                assert len(block.episodes) == 2 and len({e.group for e in block.episodes}) == 1
        # An episode as the store holds it: its messages, its verdict, its labels.
        block = next(b for b in sample if b.phase == "train" and b.step == 1)
        episode = block.episodes[0]
        traj = next(t for t in store.trajectories(toy_run.id, step=1, phase="train") if t.id == episode.trajectory_id)
        section = page.split(f'id="ep-{traj.id}"', 1)[1].split("</details>", 2)
        body = "".join(section[:2])
        for message in traj.messages[1:]:
            assert f"<pre>{html.escape(message.content, quote=False)}</pre>" in body
        labels = [r for r in store.labels(toy_run.id, step=1) if r.trajectory_id == traj.id]
        assert labels and all(f"<b>{r.label}</b>" in body for r in labels)
        assert ("passed" if traj.turn_verdicts[0].passed else "FAILED") in body
        # Each distinct system text is written once; later episodes with the same one link to it.
        systems = {e.system for b in sample for e in b.episodes}
        assert all(page.count(f"<pre>{html.escape(text, quote=False)}</pre>") == 1 for text in systems)
        assert page.count("characters): as in <a href=\"#ep-") == sum(len(b.episodes) for b in sample) - len(systems)
        # ... to the text itself (a browser opens the <details> around it), not to the closed episode.
        for target in set(re.findall(r'characters\): as in <a href="#([^"]+)"', page)):
            assert target.endswith("-system") and page.count(f'id="{target}"') == 1
            assert page.split(f'id="{target}"', 1)[1].startswith("><div class=\"msg\"><pre>")
        # Fewer shown on request; the counts still say how many there were.
        small = report_transcripts(store, toy_run.id, eval_limit=2, train_groups=0)
        assert all(len(b.episodes) == (2 if b.phase == "eval" else 0) for b in small)
        assert all(b.total == len(store.trajectories(toy_run.id, step=b.step, phase=b.phase)) for b in small)
    finally:
        store.close()


HOSTILE = "</pre><script>alert(1)</script><img src=x onerror=alert(2)>"


def test_a_hostile_transcript_is_escaped_everywhere_in_the_report(tmp_path):
    from seal_platform.capability import CapabilityState
    from seal_platform.types import EvalResult, Message, ToolCall, Trajectory, TurnLabel, TurnVerdict

    def hostile(group: str, sample: int) -> Trajectory:
        return Trajectory(
            id=f'{group}{sample}" onmouseover="alert(3)',
            task_id=f'task"><script>x()</script>{sample}', category="<b>cat</b>", group=group, sample=sample,
            reward=float(sample), finish="<i>done</i>",
            messages=[Message(role="system", content=f"tools {HOSTILE}"), Message(role="user", content=HOSTILE),
                      Message(role="assistant", content=f"<tool_call>{HOSTILE}</tool_call>", trainable=True),
                      Message(role="tool", content=HOSTILE)],
            tool_calls=[ToolCall(turn=0, name="<script>name()</script>", arguments={"q": "<script>alert(1)</script>"},
                                 result=HOSTILE)],
            turn_verdicts=[TurnVerdict(turn=0, passed=False, reached=True, checks={"diff": HOSTILE})])

    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("hostile-run", name="<script>n()</script>", recipe="", config={"environment": "x"},
                     config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    train = [hostile("g0", 0), hostile("g0", 1)]
    store.record_step("hostile-run", step=0, epoch=0, trajectories=train,
                      labels=[TurnLabel(trajectory_id=t.id, turn=0, label="<script>lab()</script>", source="judge",
                                        rationale=HOSTILE) for t in train],
                      label_weights={"<script>lab()</script>": 1.5}, state=CapabilityState(), interface_revision=0,
                      metrics={}, timings={"collect": 1.0})
    store.add_evaluation("hostile-run", 1, EvalResult(split="eval", per_category={"<b>cat</b>": 0.0}, n_tasks=1,
                                                      trajectories=[hostile("e", 0)]))
    store.close()
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", "hostile-run", "--store", f"sqlite:///{tmp_path / 'store.sqlite'}",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    # The transcripts are there (three episodes), escaped; nothing of them became markup.
    assert page.count('<details class="episode') == 3
    assert "<script" not in page.lower() and "<img src=x" not in page and "<b>cat</b>" not in page
    assert 'onmouseover="' not in page and 'id="ep-g00&quot; onmouseover=&quot;alert(3)"' in page
    assert '{"q": "&lt;script&gt;alert(1)&lt;/script&gt;"}' in page  # the tool arguments
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "&lt;script&gt;name()&lt;/script&gt;" in page and "&lt;script&gt;lab()&lt;/script&gt;" in page
    assert 'id="ep-' in page and 'href="#transcripts-eval-1"' in page and 'href="#transcripts-train-0"' in page
    # The side-by-side page of the same transcripts: escaped the same way.
    pairs = tmp_path / "pairs.html"
    result = CliRunner().invoke(cli, ["transcripts", "hostile-run", "--against", "hostile-run", "--eval", "--step", "1",
                                      "--against-step", "1", "--html",
                                      str(pairs), "--store", f"sqlite:///{tmp_path / 'store.sqlite'}"])
    assert result.exit_code == 0, result.output
    side = pairs.read_text()
    assert side.count('<table class="pair">') == 1 and "<script" not in side.lower() and "<img src=x" not in side
    assert '{"q": "&lt;script&gt;alert(1)&lt;/script&gt;"}' in side and "&lt;script&gt;n()&lt;/script&gt;" in side


def test_pages_go_where_asked_and_an_unwritable_path_is_one_error(toy_run, tmp_path):
    store = ["--store", f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"]
    runner = CliRunner()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for command in (["report", toy_run.id, "--out", str(blocker / "report.html")],
                    ["compare", toy_run.id, "--html", str(blocker / "compare.html")],
                    ["transcripts", toy_run.id, "--against", toy_run.id, "--eval", "--step", "0", "--html",
                     str(blocker / "pairs.html")]):
        result = runner.invoke(cli, [*command, *store])
        assert result.exit_code == 2 and f"cannot write {blocker}" in result.output, (command, result.output)
        assert "Traceback" not in result.output
    # A file name with another suffix is that file (it became a folder with report.html inside); a name with no
    # suffix, or an existing folder, gets report.html.
    for out, written in (
        (tmp_path / "page.htm", tmp_path / "page.htm"),
        (tmp_path / "pages", tmp_path / "pages" / "report.html"),
        (tmp_path, tmp_path / "report.html"),
    ):
        result = runner.invoke(cli, ["report", toy_run.id, "--out", str(out), *store])
        assert result.exit_code == 0 and written.is_file() and written.read_text().startswith("<!DOCTYPE html>"), out
