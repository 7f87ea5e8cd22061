"""The hook reference (``docs/hooks.md``), generated from :mod:`seal_platform.hookspecs`.

The hook specs are the one source of truth; this renders them (kind, signature, who is called, how results
combine, the full docstring) so the reference cannot drift from them. A test compares ``docs/hooks.md`` with
:func:`render`: after adding, renaming or changing a hook, regenerate it with::

    python -m seal_platform.hookdocs > docs/hooks.md
"""

from __future__ import annotations

import inspect
import re
import sys

from . import hookspecs

_SECTION = re.compile(r"^# --- (\w+) hooks")

_KIND_TEXT = {
    "setup": "Setup hooks tell the core what a plugin provides. Every plugin's answer is collected.",
    "lifecycle": "Lifecycle hooks are called on every enabled plugin that implements them.",
    "tracking": "The tracking hook sees what the run records, right after the store has it.",
    "stage": "Stage hooks are called by the run loop, with keyword arguments, in this order each training "
             "step: collect -> diagnose -> evolve_interface -> reweight -> optimize; evaluate before training, "
             "every `evaluation.every` steps and at the end. Single-owner stages are called on their owner only.",
}


def specs() -> list[tuple[str, str, object]]:
    """(kind, name, function) of every hook spec, in the order of ``hookspecs.py``; the kind is the section
    (``# --- <kind> hooks``) the spec is written in."""
    source = inspect.getsource(hookspecs).splitlines()
    kind, kinds = "other", {}
    for line in source:
        match = _SECTION.match(line)
        if match:
            kind = match.group(1)
        name = re.match(r"^def (\w+)\(", line)
        if name:
            kinds[name.group(1)] = kind
    marker = f"{hookspecs.PROJECT}_spec"
    found = [(kinds.get(name, "other"), name, f) for name, f in vars(hookspecs).items()
             if inspect.isfunction(f) and hasattr(f, marker)]
    order = {name: i for i, name in enumerate(kinds)}
    return sorted(found, key=lambda item: order.get(item[1], len(order)))


def _signature(f: object) -> str:
    sig = inspect.signature(f)  # type: ignore[arg-type]
    params = ", ".join(f"{p.name}: {p.annotation}" if p.annotation is not inspect.Parameter.empty else p.name
                       for p in sig.parameters.values())
    ret = f" -> {sig.return_annotation}" if sig.return_annotation is not inspect.Signature.empty else ""
    return f"{f.__name__}({params}){ret}"  # type: ignore[attr-defined]


def _combine(f: object) -> str:
    opts = getattr(f, f"{hookspecs.PROJECT}_spec")
    if opts.get("firstresult"):
        return "first non-None result wins"
    if inspect.signature(f).return_annotation in (None, "None"):  # type: ignore[arg-type]
        return "return value ignored"
    return "all results collected"


def _markdown(doc: str) -> str:
    """Sphinx field lists as markdown bullets (continuation lines stay indented under them)."""
    doc = re.sub(r"^:param (\w+):", r"- `\1`:", doc, flags=re.M)
    return re.sub(r"^:returns:", "- returns:", doc, flags=re.M)


def render() -> str:
    """The whole of ``docs/hooks.md``."""
    out = [
        "# Hook reference",
        "",
        "<!-- Generated from seal_platform/hookspecs.py by `python -m seal_platform.hookdocs > docs/hooks.md`;",
        "     tests/core/test_hook_docs.py fails when this file and the specs differ. Edit the specs, not this. -->",
        "",
        inspect.getdoc(hookspecs) or "",
        "",
        "| hook | kind | called on | arguments | results |",
        "|---|---|---|---|---|",
    ]
    all_specs = specs()
    for kind, name, f in all_specs:
        args = ", ".join(f"`{p}`" for p in inspect.signature(f).parameters) or "none"  # type: ignore[arg-type]
        out.append(f"| [`{name}`](#{name}) | {kind} | {hookspecs.CALLED_ON.get(name, '?')} | {args} | {_combine(f)} |")
    current = None
    for kind, name, f in all_specs:
        if kind != current:
            current = kind
            out += ["", f"## {kind.capitalize()} hooks", ""]
            if kind in _KIND_TEXT:
                out += [_KIND_TEXT[kind], ""]
        out += [
            f"### {name}",
            "",
            "```python",
            _signature(f),
            "```",
            "",
            f"*{kind} hook; called on {hookspecs.CALLED_ON.get(name, '?')}; {_combine(f)}.*",
            "",
            _markdown(inspect.getdoc(f) or ""),
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render())
