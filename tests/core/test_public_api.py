"""What a plugin author and a script import from the core, and that importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import pluggy


def test_hookimpl_is_importable_from_the_package_and_marks_for_the_project():
    from seal_platform import hookimpl
    from seal_platform.hookspecs import PROJECT

    assert isinstance(hookimpl, pluggy.HookimplMarker) and hookimpl.project_name == PROJECT


def test_the_public_modules_import_without_heavy_libraries():
    code = (
        "import sys\n"
        "from seal_platform import hookimpl\n"
        "from seal_platform.planning import plan_recipe, check_recipe, Plan\n"
        "from seal_platform.loop import run_plan, Runner\n"
        "from seal_platform.checkpoints import write_checkpoint\n"
        "heavy = sorted(m for m in ('torch', 'vllm', 'ray', 'peft', 'openai', 'transformers') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_version_is_the_installed_package_s_and_read_only_when_asked_for():
    # Importing the package reads no distribution metadata (every worker and replica process imports it);
    # asking for __version__ does, and gets the installed version.
    code = (
        "import sys\n"
        "import seal_platform\n"
        "print('importlib.metadata' in sys.modules)\n"
        "print(seal_platform.__version__)\n"
        "from importlib.metadata import version\n"
        "print(version('seal-platform'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    read_on_import, lazy, installed = out.stdout.split()
    assert read_on_import == "False" and lazy == installed


def test_an_assistant_message_keeps_what_the_engine_sampled_it_with():
    from seal_platform.types import Generation, Message

    gen = Generation(text="hi", token_ids=[5, 6], logprobs=[-0.1, -0.2], policy_version=3, adapter="lora-v4")
    msg = Message.from_generation(gen)
    assert (msg.role, msg.content, msg.token_ids, msg.logprobs) == ("assistant", "hi", [5, 6], [-0.1, -0.2])
    assert msg.trainable and msg.policy_version == 3 and msg.adapter == "lora-v4"
    gen.token_ids.append(7)  # a copy: the engine's buffers are not shared with the stored message
    assert msg.token_ids == [5, 6]
