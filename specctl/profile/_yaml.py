"""YAML documents with positions: every value keeps the file, line and column it came from.

PyYAML's composer already knows where each node starts; we keep that map beside the plain data
so a schema error deep in a profile can point at the exact line, like ansible's errors do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specctl.errors import DocumentError, DocumentProblem

try:  # the C loader is several times faster; fall back where libyaml is absent
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    """Where a value was written: 1-based line and column."""

    file: str
    line: int
    column: int


@dataclass(frozen=True)
class YamlDocument:
    """Plain data of one YAML file plus the position of every key and value in it."""

    file: str
    data: Any
    positions: dict[Path_, Position]
    lines: tuple[str, ...]

    def position(self, path: Path_) -> Position | None:
        """The position of `path`, or of its nearest written ancestor."""
        while True:
            if path in self.positions:
                return self.positions[path]
            if not path:
                return None
            path = path[:-1]


def load_yaml(path: Path) -> YamlDocument:
    """Read one YAML file into data with positions; syntax errors and duplicate keys are DocumentErrors."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError([DocumentProblem(file, None, None, "", "file not found", "check the path")]) from None
    except UnicodeDecodeError as exc:
        raise DocumentError([DocumentProblem(file, None, None, "", f"not UTF-8 text: {exc.reason}", "save the file as UTF-8")]) from None
    return parse_yaml(text, file)


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse YAML text; see `load_yaml`."""
    lines = tuple(text.splitlines())
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else None
        column = mark.column + 1 if mark else None
        problem = DocumentProblem(
            file, line, column, "", f"invalid YAML: {exc.problem}",
            "fix the YAML syntax at this position (indentation, a missing ':' or an unclosed quote)",
            _line(lines, line),
        )
        raise DocumentError([problem]) from None
    positions: dict[Path_, Position] = {}
    problems: list[DocumentProblem] = []
    data = _construct(node, (), file, positions, problems, lines) if node is not None else None
    if problems:
        raise DocumentError(problems)
    return YamlDocument(file, data, positions, lines)


def _line(lines: tuple[str, ...], line: int | None) -> str | None:
    if line is None or not 0 < line <= len(lines):
        return None
    return lines[line - 1]


def _construct(
    node: yaml.Node, path: Path_, file: str, positions: dict[Path_, Position],
    problems: list[DocumentProblem], lines: tuple[str, ...],
) -> Any:
    positions[path] = Position(file, node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            if not isinstance(key, str):
                key = str(key)
            if key in result:
                line = key_node.start_mark.line + 1
                problems.append(DocumentProblem(
                    file, line, key_node.start_mark.column + 1, ".".join(map(str, (*path, key))),
                    f"duplicate key {key!r}", "remove one of the two entries", _line(lines, line),
                ))
                continue
            result[key] = _construct(value_node, (*path, key), file, positions, problems, lines)
            # point at the key, not its value: that is where a reader looks for a field
            positions[(*path, key)] = Position(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*path, i), file, positions, problems, lines) for i, item in enumerate(node.value)]
    return _scalar(node)


_CONSTRUCTOR = yaml.constructor.SafeConstructor()


def _scalar(node: yaml.Node) -> Any:
    """Resolve a scalar with the safe constructor (ints, floats, bools, nulls, strings)."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    return _CONSTRUCTOR.construct_object(node, deep=True)
