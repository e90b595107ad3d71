"""A flat YAML mapping of scalars: written here, read with PyYAML when importable, else here.

torch is the core's one hard dependency, so the launch config cannot rely on PyYAML. The files
`accelerate-core config` writes are a flat `key: value` mapping, every string double-quoted. The
small reader accepts that subset (plus what people type by hand: comments, single quotes, plain
words) and gives each scalar the value PyYAML (YAML 1.1) would give it; anything outside the
subset is rejected rather than guessed, so the two readers never disagree on an accepted file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accelerate_core.errors import ConfigFileError, explain

Scalar = str | int | float | bool | None

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# YAML 1.1 as PyYAML resolves plain scalars; yes/no/on/off are booleans there, so they are here.
_TRUE = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"}
_FALSE = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"}
_NULL = {"", "~", "null", "Null", "NULL"}
_INT = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+][0-9]+)?$")
# What PyYAML's resolver turns into ints, floats or dates beyond the simple forms above (octal
# 010, 1_000, 0x1f, 1:30 sexagesimal, .inf, 2024-01-31): the small reader refuses these.
_YAML_SPECIAL = re.compile(
    r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+
    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+
    |[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)
    |[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?.*)$""",
    re.X,
)
# Plain scalars starting with these mean something else in YAML (flow, anchors, tags, blocks...).
_INDICATORS = tuple("[]{}&*!|>%@`,")
_BLOCK_INDICATOR = re.compile(r"^[-?:](\s|$)")  # "- item", "? key": sequences and complex keys


def dump(mapping: Mapping[str, Scalar], header: str = "") -> str:
    """YAML text for a flat mapping; strings are double-quoted (JSON escapes are valid YAML)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for key, value in mapping.items():
        if not _KEY.match(key):
            raise ValueError(f"not a plain key: {key!r}")
        lines.append(f"{key}: {_scalar_text(value)}")
    return "\n".join(lines) + "\n"


def _scalar_text(value: Scalar) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        # PyYAML reads `1e-05` as a string: give every float a dot before the exponent.
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    return json.dumps(value)


def load(path: Path) -> dict[str, Scalar]:
    """Read a flat mapping from a file, PyYAML when importable, else the small reader."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(
            explain(f"config file {path}", f"it cannot be read ({exc.strerror})", "a readable YAML file",
                    "check the path, or write one with `accelerate-core config`")
        ) from None
    return loads(text, source=str(path))


def loads(text: str, source: str = "<string>", use_pyyaml: bool | None = None) -> dict[str, Scalar]:
    """Parse a flat mapping. `use_pyyaml=None` picks PyYAML when it is importable."""
    if use_pyyaml is None:
        try:
            import yaml  # noqa: F401
        except ImportError:
            use_pyyaml = False
        else:
            use_pyyaml = True
    data = _load_pyyaml(text, source) if use_pyyaml else _load_small(text, source)
    for key, value in data.items():
        if not isinstance(key, str) or isinstance(value, (dict, list)):
            raise _error(source, f"entry {key!r}", "the config is a flat mapping of names to scalars")
    return data


def _load_pyyaml(text: str, source: str) -> dict[str, Scalar]:
    import yaml

    try:
        # A loader that refuses duplicate keys: PyYAML silently keeps the last one otherwise.
        data = yaml.load(text, Loader=_strict_loader())
    except yaml.YAMLError as exc:
        raise _error(source, "its YAML", f"it does not parse ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _error(source, "its top level", f"it is a {type(data).__name__}, not a mapping")
    return data


def _strict_loader() -> Any:
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def _load_small(text: str, source: str) -> dict[str, Scalar]:
    data: dict[str, Scalar] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or line in ("---", "..."):
            continue
        where = f"line {number} ({raw.strip()!r})"
        if raw[0].isspace():
            raise _error(source, where, "indented lines (nested values) are not part of a flat config")
        key, sep, rest = line.partition(":")
        key = key.strip()
        if not sep or not _KEY.match(key) or (rest and not rest[0].isspace()):
            raise _error(source, where, "it is not a `name: value` line")
        if key in data:
            raise _error(source, where, f"the key {key!r} appears twice")
        data[key] = _parse_value(rest.strip(), source, where)
    return data


def _parse_value(text: str, source: str, where: str) -> Scalar:
    if text.startswith('"'):
        end = _closing_double_quote(text)
        if end < 0:
            raise _error(source, where, "the double-quoted string is not closed")
        _expect_only_comment(text[end + 1 :], source, where)
        try:
            value: str = json.loads(text[: end + 1])
        except json.JSONDecodeError:
            raise _error(source, where, "the double-quoted string has an unknown escape") from None
        return value
    if text.startswith("'"):
        match = re.match(r"^'((?:[^']|'')*)'", text)
        if not match:
            raise _error(source, where, "the single-quoted string is not closed")
        _expect_only_comment(text[match.end() :], source, where)
        return match.group(1).replace("''", "'")
    plain = re.split(r"\s+#", text, maxsplit=1)[0].strip()
    if plain.startswith("#"):
        return None  # `key: # comment` is an empty value, i.e. null
    if plain.startswith(_INDICATORS) or _BLOCK_INDICATOR.match(plain) or ": " in plain:
        raise _error(source, where, "this reader supports plain scalars only; quote the value")
    if plain in _NULL:
        return None
    if plain in _TRUE:
        return True
    if plain in _FALSE:
        return False
    if _INT.match(plain):
        return int(plain)
    if _FLOAT.match(plain):
        return float(plain)
    if _YAML_SPECIAL.match(plain):
        raise _error(source, where, f"{plain!r} has a YAML-specific meaning; quote it")
    return plain


def _closing_double_quote(text: str) -> int:
    index = 1
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text[index] == '"':
            return index
        index += 1
    return -1


def _expect_only_comment(rest: str, source: str, where: str) -> None:
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise _error(source, where, "there is text after the closing quote")


def _error(source: str, where: str, why: str) -> ConfigFileError:
    return ConfigFileError(
        explain(
            f"config file {source}, {where}",
            why,
            "a flat mapping, one `name: value` per line (strings may be quoted)",
            "correct that line, or write a fresh file with `accelerate-core config`",
        )
    )
