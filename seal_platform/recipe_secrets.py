"""Secrets in recipes: given through the environment, never shown, stored or written.

A setting that carries a secret (an MCP server's ``headers`` and ``env``, a judge's API key, a database URL's
password) is given in a recipe as a reference to an environment variable, in either form:

- ``${NAME}`` anywhere in a string of a plugin's section (``Authorization: "Bearer ${MCP_TOKEN}"``) or in
  ``store:`` (``postgresql://seal:${PGPASSWORD}@db/runs``): the run keeps the reference, and the value is read
  from the environment when the settings are validated for use (``$${`` writes a literal ``${``);
- a setting named ``*_env`` that a plugin reads itself (``api_key_env: OPENAI_API_KEY``).

Either way the recipe, the run's ``config.json``, the store and every view of them hold the reference, not the
secret. A secret written out in a recipe anyway is *redacted* (:func:`redact`) wherever a config is shown or
written: ``config.json``, the store, ``config show``, ``show`` (and ``--json``), the HTML report, error
messages and resume hints. What is secret:

- a plugin setting marked so by its model: a pydantic ``SecretStr`` / ``SecretBytes`` field, or any field
  with ``json_schema_extra=SECRET`` (``Field(default_factory=dict, json_schema_extra=SECRET)``: every value of
  the mapping);
- a key whose name says so, in any section (:data:`SECRET_NAME`: ``headers`` and ``env`` mappings, keys that
  end in ``password``, ``token``, ``secret``, ``api_key``, ``authorization``, ``cookie``, ``credentials``,
  ``dsn``; ``max_new_tokens`` and ``api_key_env``, which names a variable, are no secrets);
- the password of any URL (``scheme://user:PASSWORD@host``), in any string.
"""

from __future__ import annotations

import os
import re
import typing
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr

from .errors import ConfigError

# ``json_schema_extra`` of a plugin setting that carries a secret (as ``config.RUNTIME`` marks a runtime one).
SECRET: dict[str, Any] = {"secret": True}

# What a redacted value reads as.
REDACTED = "<redacted>"

ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ESCAPED = "$${"

# Keys whose values are secret whatever their model says: the mappings an MCP server is given (request headers,
# process environment) and any name that says it holds a secret. A name ending in ``_env`` names a variable,
# not a secret.
SECRET_NAME = re.compile(r"^(headers|env)$|(^|[_-])(token|secret|password|passwd|passphrase|cookie|credentials?|"
                         r"authorization|auth|dsn)$|(^|[_-])(api|private|secret|access|client)[_-]?key$|^apikey$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# scheme://user:password@host: the password (SQLAlchemy's URL.render_as_string(hide_password=True) shows it as ***).
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)([^@/\s]+)(@)")

# Values read from the environment into secret settings, and secrets written out in a recipe, as met in this
# process: :func:`scrub` hides them in any text (an error message a plugin wrote with its header in it).
_KNOWN: set[str] = set()
_MIN_KNOWN = 6  # shorter values would hide ordinary words


def is_secret_name(name: Any) -> bool:
    """Whether a key named ``name`` holds a secret by its name (``Authorization``, ``api_key``, ``headers``)."""
    text = _CAMEL.sub("_", str(name)).lower()  # accessToken: access_token
    return bool(SECRET_NAME.search(text))


def _marked(field: Any) -> bool:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and extra.get("secret"):
        return True
    return any(t in (SecretStr, SecretBytes) for t in _annotation_types(field.annotation))


def _annotation_types(annotation: Any) -> list[Any]:
    found, pending = [], [annotation]
    while pending:
        item = pending.pop()
        found.append(item)
        pending.extend(typing.get_args(item))
    return found


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field's value (or each item of it: ``list[M]``, ``dict[str, M]``, ``M | None``)
    is validated by; None for a plain value."""
    for item in _annotation_types(annotation):
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item
    return None


def _only_references(text: str) -> bool:
    """Whether ``text`` gives its secret by environment references only: nothing in it but ``${NAME}``s,
    blanks and an authorization scheme (``Bearer ${TOKEN}``)."""
    rest = ENV_REFERENCE.sub("", text).strip()
    return ENV_REFERENCE.search(text) is not None and rest.lower() in ("", "bearer", "basic", "token")


def _hide(value: Any) -> Any:
    """A secret value as it may be shown: references to the environment as they are, the rest redacted
    (each value of a mapping or list on its own; keys kept)."""
    if isinstance(value, dict):
        return {key: _hide(sub) for key, sub in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hide(sub) for sub in value]
    if value is None or isinstance(value, bool) or value == "":
        return value
    if isinstance(value, str) and _only_references(value):
        return value
    if isinstance(value, str) and len(value) >= _MIN_KNOWN:
        _KNOWN.add(value)
    return REDACTED


def hide_url_password(text: str) -> str:
    """``text`` with the password of every URL in it shown as ``***`` (as SQLAlchemy's
    ``render_as_string(hide_password=True)`` does); a ``${NAME}`` in its place is kept."""
    def masked(match: re.Match[str]) -> str:
        password = match.group(2)
        return match.group(0) if ENV_REFERENCE.fullmatch(password) else f"{match.group(1)}***{match.group(3)}"

    return _URL_PASSWORD.sub(masked, text)


def redact(value: Any, model: type[BaseModel] | None = None) -> Any:
    """A copy of ``value`` (a config's data: mappings, lists, scalars) with every secret in it redacted: the
    fields ``model`` marks secret (followed into its nested models), every key whose name says it is secret,
    and every URL's password. References to the environment (``${NAME}``) are kept: they are no secret."""
    if isinstance(value, dict):
        fields = model.model_fields if model is not None else {}
        out = {}
        for key, sub in value.items():
            field = fields.get(key) if isinstance(key, str) else None
            if is_secret_name(key) or (field is not None and _marked(field)):
                out[key] = _hide(sub)
            else:
                out[key] = redact(sub, _submodel(field.annotation) if field is not None else None)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(sub, model) for sub in value]
    if isinstance(value, str):
        return hide_url_password(value)
    return value


def redact_config(data: dict[str, Any], models: dict[str, type[BaseModel]] | None = None) -> dict[str, Any]:
    """A run config's data (``RunConfig.model_dump(mode="json")``, as stored) with its secrets redacted:
    ``store:``'s password, and each plugin section's secrets (``models``: the sections' models, where known,
    for the fields they mark)."""
    models = models or {}
    out = redact({key: sub for key, sub in data.items() if key != "settings"})
    settings = data.get("settings")
    if isinstance(settings, dict):
        out["settings"] = {section: redact(raw, models.get(section)) for section, raw in settings.items()}
    elif "settings" in data:
        out["settings"] = redact(settings)
    return out


def redacted_paths(value: Any, at: str = "") -> list[str]:
    """The dotted paths in ``value`` (a stored config's data) that hold :data:`REDACTED`: secrets that were
    written out in the recipe and not stored, which a resume cannot use."""
    found: list[str] = []
    if value == REDACTED:
        found.append(at)
    elif isinstance(value, dict):
        for key, sub in value.items():
            found += redacted_paths(sub, f"{at}.{key}" if at else str(key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            found += redacted_paths(sub, f"{at}.{i}" if at else str(i))
    return found


def expand(value: Any, where: str, environ: typing.Mapping[str, str] | None = None, *,
           secret: bool = False) -> Any:
    """``value`` with every ``${NAME}`` in its strings replaced by the environment variable ``NAME`` (``$${``:
    a literal ``${``). A variable that is not set is a :class:`ConfigError` naming it and the setting
    (``where``). Values read into a secret setting (``secret``, or a key named so) are remembered, for
    :func:`scrub`."""
    environ = os.environ if environ is None else environ
    if isinstance(value, dict):
        return {key: expand(sub, f"{where}.{key}", environ, secret=secret or is_secret_name(key))
                for key, sub in value.items()}
    if isinstance(value, list):
        return [expand(sub, f"{where}.{i}", environ, secret=secret) for i, sub in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(f"{where}: the environment variable {name} is not set (the recipe gives this setting "
                              f"as ${{{name}}}): export {name}=... before the command, or write $${{{name}}} for a "
                              "literal '${'.")
        found = environ[name]
        if (secret or is_secret_name(where.rsplit(".", 1)[-1])) and len(found) >= _MIN_KNOWN:
            _KNOWN.add(found)
        return found

    parts = value.split(_ESCAPED)
    return "${".join(ENV_REFERENCE.sub(variable, part) for part in parts)


def expand_settings(raw: Any, model: type[BaseModel], where: str,
                    environ: typing.Mapping[str, str] | None = None) -> Any:
    """A plugin section's raw values with ``${NAME}`` references expanded (:func:`expand`), the values of the
    fields ``model`` marks secret remembered as secrets."""
    if not isinstance(raw, dict):
        return expand(raw, where, environ)
    out = {}
    for key, sub in raw.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        at = f"{where}.{key}"
        if field is not None and _marked(field):
            out[key] = expand(sub, at, environ, secret=True)
        elif field is not None and (nested := _submodel(field.annotation)) is not None:
            if isinstance(sub, list):  # list[M]
                out[key] = [expand_settings(item, nested, f"{at}.{i}", environ) for i, item in enumerate(sub)]
            elif isinstance(sub, dict) and _is_mapping_of_models(field.annotation):  # dict[str, M]
                out[key] = {k: expand_settings(v, nested, f"{at}.{k}", environ) for k, v in sub.items()}
            else:  # M
                out[key] = expand_settings(sub, nested, at, environ)
        else:
            out[key] = expand(sub, at, environ)
    return out


def _is_mapping_of_models(annotation: Any) -> bool:
    return any(typing.get_origin(item) in (dict, typing.Mapping) for item in _annotation_types(annotation))


def remember(*values: Any) -> None:
    """Treat these values (a store URL's password) as secrets :func:`scrub` hides."""
    for value in values:
        if isinstance(value, str) and len(value) >= _MIN_KNOWN:
            _KNOWN.add(value)


def scrub(text: str) -> str:
    """``text`` (an error message, a hint) with every URL's password and every secret met so far in this
    process (:func:`expand`, :func:`redact`, :func:`remember`) shown as :data:`REDACTED`."""
    text = hide_url_password(text)
    for secret in sorted(_KNOWN, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def shown_store_url(url: Any) -> str:
    """A store's URL as commands print it (errors, resume hints): SQLAlchemy's rendering with the password
    hidden, for any URL it can parse; others with :func:`hide_url_password`."""
    text = str(url)
    if "://" not in text:
        return text
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(text)
        if parsed.password is not None:
            remember(str(parsed.password))
        return parsed.render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: the regular expression still hides a password
        return hide_url_password(text)
