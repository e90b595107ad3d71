"""The launch config on disk: a flat YAML mapping of names to scalars, through PyYAML's safe API.

PyYAML reads and writes the YAML (`yaml.safe_load`, `yaml.safe_dump`: no Python objects are ever
constructed from a file). This module adds only what the launch config needs on top: the
document must be one flat mapping with each key once, and every refusal is a ConfigFileError
naming the file, what is wrong, what is valid and the fix. Which keys and values are valid is
config.py's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from accelerate_core.errors import ConfigFileError, explain

Scalar = str | int | float | bool | None


def dump(mapping: Mapping[str, Scalar], header: str = "") -> str:
    """YAML text for a flat mapping, keys in the given order, below `header` as # comments."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    # sort_keys=False keeps LaunchConfig's order (version first); block style gives one
    # `name: value` per line, the form people read and edit. safe_dump quotes a string only
    # where YAML would read it as something else (mixed_precision: 'no' stays a string).
    return comments + yaml.safe_dump(dict(mapping), sort_keys=False, default_flow_style=False)


def load(path: Path) -> dict[str, Scalar]:
    """The flat mapping a config file holds ({} for an empty file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(
            explain(f"config file {path}", f"it cannot be read ({exc.strerror})", "a readable YAML file",
                    "check the path, or write one with `accelerate-core config`")
        ) from None
    return loads(text, source=str(path))


def loads(text: str, source: str = "<string>") -> dict[str, Scalar]:
    """Parse a flat mapping; `source` names the file in error messages."""
    try:
        _refuse_duplicate_keys(text, source)
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _error(source, "its YAML", f"it does not parse ({exc})") from None
    if data is None:  # empty, or comments only
        return {}
    if not isinstance(data, dict):
        raise _error(source, "its top level", f"it is a {type(data).__name__}, not a mapping")
    for key, value in data.items():
        if not isinstance(key, str) or isinstance(value, (dict, list, set)):
            raise _error(source, f"entry {key!r}", "the config is a flat mapping of names to scalars")
    return data


def _refuse_duplicate_keys(text: str, source: str) -> None:
    """safe_load silently keeps the last of two equal keys, so a second `backend:` line would
    quietly win; the launcher refuses instead. Read from the node tree (yaml.compose parses
    without constructing anything), so no custom loader is needed."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(node, yaml.MappingNode):
        return  # not a mapping: loads() explains
    seen: set[str] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue  # a complex key: loads() refuses it as not a name
        key = str(key_node.value)
        if key in seen:
            where = f"line {key_node.start_mark.line + 1} ({key!r})"
            raise _error(source, where, f"the key {key!r} appears twice")
        seen.add(key)


def _error(source: str, where: str, why: str) -> ConfigFileError:
    return ConfigFileError(
        explain(
            f"config file {source}, {where}",
            why,
            "a flat mapping, one `name: value` per line (strings may be quoted)",
            "correct that line, or write a fresh file with `accelerate-core config`",
        )
    )
