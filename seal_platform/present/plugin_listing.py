"""The ``seal-platform plugins`` and ``seal-platform settings`` views: the plugins with what they provide, one
plugin in full, and every setting of a plugin's settings model."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from .safe import clean as _safe


def clean(value: Any) -> str:
    """Plugin-supplied text made safe for the terminal (newlines kept)."""
    return _safe(value, lines=True)


def plugins_table(rows: list[dict[str, Any]]) -> Table:
    """The installed plugins (``PluginRecord.to_dict`` rows with ``provides`` and ``clashes``), one row each."""
    # Narrow enough for 80 columns: what a plugin provides, then its hooks, in one column that wraps at
    # commas (registration hooks are what "provides" shows); the rest is `plugins NAME`.
    table = Table(title="seal-platform plugins", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("provides; hooks", overflow="fold")
    for row in rows:
        status = Text(row["status"], style="" if row["status"] == "loaded" else "red")
        cell = Text(clean(", ".join(row["provides"])))
        for note in row["clashes"]:
            cell.append(("\n" if cell else "") + clean(f"clash: {note}"), style="red")
        hooks = [hook for hook in row["hooks"] if not hook.startswith("register_")]
        if hooks:
            cell.append(("\n" if cell else "") + "hooks: " + ", ".join(hooks), style="dim")
        table.add_row(Text(clean(row["name"])), Text(clean(row["version"] or "")), status, cell)
    return table


def plugin_details(row: dict[str, Any], record: Any, host: Any, commands: list[str]) -> Table:
    """``seal-platform plugins NAME``: one plugin's record in full, one field a line."""
    sections = sorted(s for s, (owner, _) in host.settings_owners().items() if owner == record.name)
    sections += sorted(f"{s} (clash)" for s, owners in host.clashes("settings").items()
                       if any(owner == record.name for owner, _ in owners))
    fields = [
        ("plugin", f"{row['name']} {row['version'] or ''}".strip()),
        ("distribution", row["distribution"] or ""),
        ("entry point", record.value),
        ("status", row["status"] + (f" ({record.reason})" if record.reason else "")),
        ("error", row["error"] or ""),
        ("provides", ", ".join(row["provides"])),
        ("clashes", "; ".join(row["clashes"])),
        ("settings", ", ".join(sections) + (f" (seal-platform settings {record.name})" if sections else "")),
        ("commands", ", ".join(commands)),
        ("hooks", ", ".join(row["hooks"])),
    ]
    table = Table(box=None, show_header=False, padding=(0, 1, 0, 0))
    table.add_column(no_wrap=True, style="bold")
    table.add_column(overflow="fold")
    for label, value in fields:
        if value:
            table.add_row(label, Text(value))
    return table


def settings_rows(model: type[Any], prefix: str) -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) for every field of a settings model, nested models flattened."""
    import typing

    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows.append(
                (
                    key,
                    annotation.__name__,
                    "(section)",
                    field.description or (annotation.__doc__ or "").strip().split("\n")[0],
                )
            )
            rows.extend(settings_rows(annotation, key))
            continue
        kind = str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")
        if typing.get_origin(annotation) is typing.Literal:
            kind = "one of " + ", ".join(map(str, typing.get_args(annotation)))
        if field.default is not PydanticUndefined:
            default = field.default
        elif field.default_factory is not None:
            default = field.default_factory()  # type: ignore[call-arg]
        else:
            default = "(required)"
        rows.append(
            (
                key,
                kind,
                json.dumps(default, default=str)
                if not isinstance(default, str) or default != "(required)"
                else default,
                field.description or "",
            )
        )
    return rows
