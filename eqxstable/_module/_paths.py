"""How a message of the module layer names a place: `Net.layers[0].table`, and the field's name."""

from typing import Any


def field_path(path: Any) -> str:
    """`("Net", ".layers"), 0), ".table")` as `Net.layers[0].table`."""
    parts = []
    while type(path) is tuple:
        path, part = path
        if type(part) is int:
            parts.append(f"[{part}]")
        elif type(part) is tuple:
            parts.append(f"[{part[0]!r}]")
        else:
            parts.append(str(part))
    parts.append(str(path))
    return "".join(reversed(parts))


def type_name(cls: type) -> str:
    """`Net` for a class, also one defined inside a function (`test.<locals>.Net`)."""
    return cls.__qualname__.rpartition("<locals>.")[2]


def field_of(path: Any) -> str:
    """The innermost attribute name on `path`, for the message's fix."""
    while type(path) is tuple:
        path, part = path
        if type(part) is str and part.startswith("."):
            return part[1:]
    return str(path)
