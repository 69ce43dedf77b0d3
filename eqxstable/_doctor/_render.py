"""The doctor's report: built once as a JSON-able dict (`--json` prints it as is), and rendered
as text from that same dict, so the two can never disagree."""

import textwrap
from collections import Counter
from typing import Any

from ._observe import Record


_WIDTH = 100
_HEADER = ("function", "jit", "calls", "hits", "misses", "compile s", "avoidable")


def _groups(misses: list[Any]) -> list[dict[str, Any]]:
    """Misses grouped by (kind, path), in order of first appearance, with the first reason."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for miss in misses:
        group = groups.get((miss.kind, miss.path))
        if group is None:
            groups[(miss.kind, miss.path)] = group = {
                "kind": miss.kind,
                "path": miss.path,
                "count": 0,
                "avoidable": getattr(miss, "avoidable", False),
                "reason": miss.reason,
                "also": list(getattr(miss, "also", ())),
            }
        group["count"] += 1
    return list(groups.values())


def _collisions(record: Record) -> dict[str, Any]:
    by_path: dict[str, dict[str, Any]] = {}
    for collision in record.collisions:
        group = by_path.setdefault(
            collision.path, {"path": collision.path, "count": 0, "reason": collision.reason}
        )
        group["count"] += 1
    programs = len({id(c) for c in record.collisions})
    return {"calls": len(record.collisions), "programs": programs, "groups": list(by_path.values())}


def equinox_row(record: Record) -> dict[str, Any]:
    avoidable = [m for m in record.misses if m.avoidable]
    return {
        "name": record.name,
        "location": record.location,
        "jit": "equinox",
        "wrappers": record.caches,
        "calls": record.calls,
        "hits": record.calls - len(record.misses),
        "misses": len(record.misses),
        "compile_seconds": record.compile_seconds,
        "trace_seconds": record.trace_seconds,
        "avoidable": len(avoidable),
        "avoidable_compile_seconds": sum(m.compile_seconds for m in avoidable),
        "misses_by_kind": dict(Counter(m.kind for m in record.misses)),
        "miss_groups": _groups(record.misses),
        "type_collisions": _collisions(record),
    }


def stable_row(wrapper: Any) -> dict[str, Any]:
    info = wrapper.cache_info()
    misses = list(wrapper.misses)
    fun = getattr(wrapper, "__wrapped__", None)
    code = getattr(fun, "__code__", None)
    return {
        "name": wrapper.name,
        "location": f"{code.co_filename}:{code.co_firstlineno}" if code else "",
        "jit": "eqxstable",
        "wrappers": 1,
        "calls": info.hits + info.misses,
        "hits": info.hits,
        "misses": info.misses,
        "compile_seconds": info.compile_seconds,
        "trace_seconds": info.trace_seconds,
        "avoidable": 0,
        "avoidable_compile_seconds": 0.0,
        "misses_by_kind": dict(Counter(m.kind for m in misses)),
        "miss_groups": _groups(misses),
        "type_collisions": {"calls": 0, "programs": 0, "groups": []},
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(name: str) -> Any:
        return sum(row[name] for row in rows)

    return {
        "calls": total("calls"),
        "hits": total("hits"),
        "misses": total("misses"),
        "compile_seconds": total("compile_seconds"),
        "avoidable": total("avoidable"),
        "avoidable_compile_seconds": total("avoidable_compile_seconds"),
        "collision_calls": sum(row["type_collisions"]["calls"] for row in rows),
        "collision_programs": sum(row["type_collisions"]["programs"] for row in rows),
    }


def _short_location(location: str) -> str:
    return location.rsplit("/", 1)[-1]


def _table(rows: list[dict[str, Any]]) -> list[str]:
    cells = [_HEADER] + [
        (
            f"{row['name']} ({_short_location(row['location'])})"
            if row["location"]
            else row["name"],
            row["jit"],
            str(row["calls"]),
            str(row["hits"]),
            str(row["misses"]),
            f"{row['compile_seconds']:.3f}",
            str(row["avoidable"]) if row["jit"] == "equinox" else "-",
        )
        for row in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_HEADER))]
    lines = []
    for c in cells:
        left = [c[0].ljust(widths[0]), c[1].ljust(widths[1])]
        right = [x.rjust(w) for x, w in zip(c[2:], widths[2:])]
        lines.append("  ".join(left + right).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _wrap(text: str, indent: str, hang: str = "  ") -> list[str]:
    return textwrap.wrap(
        text,
        _WIDTH,
        initial_indent=indent,
        subsequent_indent=" " * len(indent) + hang,
        break_on_hyphens=False,
    )


def _details(row: dict[str, Any]) -> list[str]:
    lines = []
    where = f" ({row['location']})" if row["location"] else ""
    lines.append(f"`{row['name']}`{where}: misses by kind and path")
    for group in row["miss_groups"]:
        at = f" at `{group['path']}`" if group["path"] else ""
        avoid = " [eqxstable avoids]" if group["avoidable"] else ""
        lines += _wrap(f"{group['kind']}{at}{avoid}: {group['reason']}", f"  {group['count']} x ")
    for group in row["type_collisions"]["groups"]:
        lines += _wrap(f"type collision at `{group['path']}`: {group['reason']}", "  ")
        lines[-1] += f" ({_count(group['count'], 'call', 'calls')})"
    return lines


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _summary(report: dict[str, Any]) -> list[str]:
    t = report["totals"]
    if report["mode"] == "stabilize":
        return _wrap(
            f"With eqxstable's `filter_jit`: {_count(t['misses'], 'miss', 'misses')} in "
            f"{_count(t['calls'], 'call', 'calls')}, {t['compile_seconds']:.2f} s compiling. "
            "Run without `--stabilize` to see what `equinox.filter_jit` does.",
            "",
            "",
        )
    misses = _count(t["misses"], "miss", "misses")
    if t["avoidable"]:
        avoided = (
            f"{t['avoidable']} of the {misses} would be avoided by eqxstable (identity: its "
            "`filter_jit` keys equivalent callables by what they compute), about "
            f"{t['avoidable_compile_seconds']:.2f} s of the {t['compile_seconds']:.2f} s spent "
            f"compiling. `eqxstable doctor --stabilize {report['script']}` runs it that way."
        )
    else:
        avoided = f"None of the {misses} would be avoided by eqxstable's identity fix."
    lines = _wrap(avoided, "", "")
    if t["collision_calls"]:
        calls = _count(t["collision_calls"], "call was", "calls were")
        other = (
            f"{calls} served a program Equinox compiled for an equal value of another type (`1` "
            "for `1.0`); eqxstable keys values type-exactly and would compile "
            f"{_count(t['collision_programs'], 'more program', 'more programs')} for them, with "
            "correct dtypes."
        )
    else:
        other = (
            "no call was served a program compiled for an equal value of another type (`1` for "
            "`1.0`), so eqxstable's type-exact keys would add no compile here."
        )
    return lines + _wrap("The other difference, type exactness: " + other, "", "")


def render_text(report: dict[str, Any]) -> str:
    mode = (
        "observe only"
        if report["mode"] == "observe"
        else "--stabilize: eqxstable.filter_jit in place of equinox.filter_jit"
    )
    lines = [
        f"eqxstable doctor: {report['script']} exited with status {report['exit_status']} ({mode})",
        "",
    ]
    rows = report["functions"]
    if not rows:
        lines.append("No `filter_jit` function was called.")
    else:
        lines += _table(rows)
        for row in rows:
            if row["miss_groups"] or row["type_collisions"]["calls"]:
                lines += ["", *_details(row)]
        lines += ["", *_summary(report)]
    if report["hooks"]["call"] != "equinox._jit._call":
        lines += [
            "",
            f"(equinox {report['equinox_version']}: calls counted through "
            f"{report['hooks']['call']}, traces through {report['hooks']['trace']}.)",
        ]
    return "\n".join(lines) + "\n"
