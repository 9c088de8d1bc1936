"""Tolerant readers for values in RocketMQ JSON documents (config files, request bodies).

fastjson writes ints, booleans and enums in several shapes depending on the writer and version
(numbers as strings, enum ordinals instead of names, ...). These helpers accept what a Java
peer could have written and fall back to a default instead of failing a whole document.
"""

from __future__ import annotations


def as_int(value: object, default: int) -> int:
    """An int from a JSON number or numeric string; ``default`` otherwise (booleans too)."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else default
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return default
    return default


def as_bool(value: object, default: bool) -> bool:
    """A bool from a JSON boolean or ``"true"``/``"false"``; ``default`` otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
    return default


def as_str(value: object, default: str) -> str:
    """A str from a JSON string (numbers are stringified); ``default`` for null and others."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return default


def as_enum_name(value: object, names: tuple[str, ...], default: str) -> str:
    """An enum name from a JSON name or an ordinal (fastjson accepts both)."""
    if isinstance(value, str) and value in names:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    return default
