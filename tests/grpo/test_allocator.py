"""The allocator advice of a CPU run (grpo.allocator): given when tcmalloc is not preloaded on Linux, naming
the installed library when there is one; a run with a CPU trainer carries it (the plugin records it as a
``cpu_allocator`` event)."""

from __future__ import annotations

import sys

from seal_platform_libs.policy import allocator
from seal_platform_plugins.grpo.run import GRPORun
from seal_platform_plugins.grpo.settings import GRPOSettings

LIB = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"


def test_no_advice_when_tcmalloc_is_preloaded_or_off_linux():
    assert allocator.advice({"LD_PRELOAD": f"/opt/x.so:{LIB}"}, LIB, "linux") is None
    assert allocator.advice({"LD_PRELOAD": "/usr/lib/libtcmalloc_minimal.so.4"}, None, "linux") is None
    assert allocator.advice({}, LIB, "darwin") is None


def test_advice_names_the_installed_library_or_how_to_install_one():
    named = allocator.advice({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, LIB, "linux")
    assert named is not None and f"LD_PRELOAD={LIB} seal-platform run" in named and "32 MiB" in named
    missing = allocator.advice({}, None, "linux")
    assert missing is not None and "libtcmalloc-minimal4" in missing and "LD_PRELOAD=" not in missing


def test_installed_tcmalloc_is_a_file_or_none():
    found = allocator.installed_tcmalloc()
    assert found is None or (found.endswith(".so.4") and "tcmalloc" in found)


def test_a_cpu_run_carries_the_advice_unless_tcmalloc_is_preloaded(tokenizer, new_tiny_model, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    run = GRPORun(new_tiny_model(), tokenizer, GRPOSettings(), apatch=None)
    if sys.platform.startswith("linux"):
        assert run.allocator_advice is not None and "C library's malloc" in run.allocator_advice
    monkeypatch.setenv("LD_PRELOAD", LIB)
    assert GRPORun(new_tiny_model(), tokenizer, GRPOSettings(), apatch=None).allocator_advice is None


def test_a_run_without_a_trainer_gives_no_advice(tokenizer, new_tiny_model, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert GRPORun(new_tiny_model(), tokenizer, GRPOSettings(), apatch=None, train=False).allocator_advice is None
