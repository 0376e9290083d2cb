"""YAML documents with positions: every value keeps the file, line and column it came from.

PyYAML's composer already knows where each node starts; we keep that map beside the plain data
so a schema error deep in a profile can point at the exact line, like ansible's errors do.

A document is untrusted input, so building its data is bounded: aliases may not expand past a
small budget (a few hundred bytes of nested aliases otherwise grow into gigabytes), an alias may
not contain itself, nesting has a depth limit, and numbers have a length and a 64-bit range.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specctl.errors import DocumentError, DocumentProblem
from specctl.profile._files import MAX_DOCUMENT_BYTES, read_bounded

try:  # the C loader is several times faster; fall back where libyaml is absent
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on the PyYAML build
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

Path_ = tuple[str | int, ...]

MAX_VALUES = 100_000  # values in one document; a profile has about a hundred, a large inventory a few thousand
MAX_ALIAS_NODES = 10_000  # values built by repeating aliases; a real profile repeats a few dozen at most
MAX_NESTING_DEPTH = 64  # a profile nests five levels deep
MAX_PROBLEMS = 50  # problems reported for one document; the rest are counted
MAX_SOURCE_LINE_CHARS = 240  # a longer line is not echoed under its error (the position still is)
MAX_NUMBER_CHARS = 100  # longer numbers are never meant; long YAML 1.1 base-60 ones take quadratic time to build
INT_LIMIT = 2**63  # numbers fit in 64 bits, so no later arithmetic or formatting meets a giant integer

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"


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
    """Read one YAML file into data with positions; unreadable files, syntax errors and duplicate
    keys are DocumentErrors."""
    file = str(path)
    raw = read_bounded(path, MAX_DOCUMENT_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            [DocumentProblem(file, None, None, "", f"not UTF-8 text: {exc.reason}", "save the file as UTF-8")]
        ) from None
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
            file,
            line,
            column,
            "",
            f"invalid YAML: {exc.problem}",
            "fix the YAML syntax at this position (indentation, a missing ':' or an unclosed quote)",
            source_line(lines, line),
        )
        raise DocumentError([problem]) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow raw; the reader gives no line
        raise DocumentError([_reader_problem(exc, text, file, lines)]) from None
    except yaml.YAMLError as exc:
        raise DocumentError(
            [DocumentProblem(file, None, None, "", f"invalid YAML: {_first_line(exc)}", "fix the YAML syntax")]
        ) from None
    except RecursionError:  # only the pure-Python composer recurses; libyaml limits nesting itself
        raise DocumentError(
            [
                DocumentProblem(
                    file, None, None, "", "invalid YAML: nested too deeply", f"nest at most {MAX_NESTING_DEPTH} levels"
                )
            ]
        ) from None
    builder = _Builder(file, lines)
    try:
        data = builder.build(node, ()) if node is not None else None
    except _Abort as abort:
        raise DocumentError([abort.problem]) from None
    if builder.problems:
        raise DocumentError(capped(builder.problems))
    return YamlDocument(file, data, builder.positions, lines)


def source_line(lines: tuple[str, ...], line: int | None) -> str | None:
    """Line `line` (1-based) to echo under an error, unless it is missing, too long to show, or holds
    characters a terminal would act on (escaping them would move the caret off its column)."""
    if line is None or not 0 < line <= len(lines):
        return None
    text = lines[line - 1]
    if len(text) > MAX_SOURCE_LINE_CHARS or not text.replace("\t", " ").isprintable():
        return None
    return text


def field_name(path: Path_) -> str:
    """A field path as errors name it, `engine.args.port`, with any unprintable character escaped."""
    return printable(".".join(map(str, path)))


def printable(text: str) -> str:
    """`text` with the characters a terminal would act on (ESC, other controls) written as escapes."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def capped(problems: list[DocumentProblem]) -> list[DocumentProblem]:
    """At most MAX_PROBLEMS problems, then one that counts the rest: a broken file must not flood the terminal."""
    if len(problems) <= MAX_PROBLEMS:
        return problems
    rest = len(problems) - MAX_PROBLEMS
    return [
        *problems[:MAX_PROBLEMS],
        DocumentProblem(
            problems[0].file,
            None,
            None,
            "",
            f"{rest} more problem(s) not shown",
            "fix the problems above and validate again",
        ),
    ]


def _reader_problem(exc: yaml.reader.ReaderError, text: str, file: str, lines: tuple[str, ...]) -> DocumentProblem:
    char = chr(exc.character) if isinstance(exc.character, int) else str(exc.character)
    index = text.find(char)
    line = text.count("\n", 0, index) + 1 if index >= 0 else None
    column = index - text.rfind("\n", 0, index) if index >= 0 else None
    return DocumentProblem(
        file,
        line,
        column,
        "",
        f"invalid YAML: the character {char!r} may not be written raw ({exc.reason})",
        f'remove it, or write it as an escape inside double quotes, e.g. "\\x{ord(char):02x}"'
        if len(char) == 1
        else "remove it",
        source_line(lines, line),
    )


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class _Abort(Exception):
    """Stops building at once: going on would only make the same problem grow."""

    def __init__(self, problem: DocumentProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_Site = tuple[yaml.Mark, Path_]  # where a value was written, and its field


class _Builder:
    """Plain data and positions from a composed node graph, within the limits above.

    Aliases make the graph share nodes, so a node met a second time was reached through an alias;
    the values built that way are counted against MAX_ALIAS_NODES, and a node met again inside
    itself is a recursive alias.
    """

    def __init__(self, file: str, lines: tuple[str, ...]) -> None:
        self.file = file
        self.lines = lines
        self.positions: dict[Path_, Position] = {}
        self.problems: list[DocumentProblem] = []
        self.built: set[int] = set()
        self.open: set[int] = set()  # the nodes being built now: a path from the root
        self.aliased = 0
        self.values = 0

    def build(self, node: yaml.Node, path: Path_, referrer: yaml.Mark | None = None, alias: _Site | None = None) -> Any:
        """Build `node` at `path`; `referrer` is where the key or list that holds it was written, and
        `alias` the outermost alias being expanded, if any: the one a reader can change."""
        here = referrer or node.start_mark
        if id(node) in self.open:
            raise _Abort(
                self._problem(
                    here,
                    path,
                    "a recursive alias: this value contains itself",
                    "replace the alias with the values it should repeat",
                )
            )
        if alias is None and id(node) in self.built:
            alias = (here, path)
        if alias is not None:
            self.aliased += 1
            if self.aliased > MAX_ALIAS_NODES:
                raise _Abort(
                    self._problem(
                        *alias,
                        f"aliases expand to more than {MAX_ALIAS_NODES} values; aliases are limited",
                        "write the values out, or repeat fewer aliases (nested aliases multiply)",
                    )
                )
        self.values += 1
        if self.values > MAX_VALUES:
            raise _Abort(
                self._problem(
                    node.start_mark,
                    path,
                    f"the document holds more than {MAX_VALUES} values",
                    "point at the intended file; real specctl documents hold far fewer",
                )
            )
        if len(path) > MAX_NESTING_DEPTH:
            raise _Abort(
                self._problem(
                    node.start_mark,
                    path,
                    f"values are nested more than {MAX_NESTING_DEPTH} levels deep",
                    "flatten the structure; no specctl field nests this deeply",
                )
            )
        self.built.add(id(node))
        self.positions[path] = self._position(node.start_mark)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path, alias)
            return [self.build(item, (*path, i), node.start_mark, alias) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: Path_, alias: _Site | None) -> dict[str, Any]:
        # merge keys first (`<<: *defaults`), so the keys written here win, in data and in positions
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged = {**self._merge_sources(value_node, path, key_node.start_mark, alias), **merged}
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.problems.append(
                    self._problem(
                        key_node.start_mark,
                        path,
                        "a key must be a plain name, not a list or mapping",
                        "write the key as plain text",
                    )
                )
                continue
            key = self._scalar(key_node, path)
            if not isinstance(key, str):
                key = str(key)
            if key in result:
                self.problems.append(
                    self._problem(
                        key_node.start_mark, (*path, key), f"duplicate key {key!r}", "remove one of the two entries"
                    )
                )
                continue
            result[key] = self.build(value_node, (*path, key), key_node.start_mark, alias)
            # point at the key, not its value: that is where a reader looks for a field
            self.positions[(*path, key)] = self._position(key_node.start_mark)
        self.positions[path] = self._position(node.start_mark)  # a merged mapping wrote its own
        return {**{k: v for k, v in merged.items() if k not in result}, **result}

    def _merge_sources(self, value: yaml.Node, path: Path_, referrer: yaml.Mark, alias: _Site | None) -> dict[str, Any]:
        """The mappings a merge key names; earlier ones win, as in YAML's merge-key rule."""
        sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
        merged: dict[str, Any] = {}
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                self.problems.append(
                    self._problem(
                        referrer,
                        path,
                        "`<<` merges mappings only",
                        "write `<<: *anchor` where the anchor names a mapping",
                    )
                )
                continue
            built = self.build(source, path, referrer, alias)
            merged = {**built, **merged}
        return merged

    def _scalar(self, node: yaml.ScalarNode, path: Path_) -> Any:
        """Resolve a scalar with the safe constructor (ints, floats, bools, nulls, strings)."""
        if node.tag in (_INT_TAG, _FLOAT_TAG) and len(node.value) > MAX_NUMBER_CHARS:
            return self._bad_number(node, path, f"a number of {len(node.value)} characters")
        try:
            value = _CONSTRUCTOR.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            self.problems.append(
                self._problem(
                    node.start_mark,
                    path,
                    f"cannot read this value: {exc.problem}",
                    "remove the tag (specctl reads plain YAML values: text, numbers, true/false, lists, mappings)",
                )
            )
            return None
        except (ValueError, OverflowError) as exc:  # `!!int abc`, a date like 2024-13-01
            self.problems.append(
                self._problem(
                    node.start_mark,
                    path,
                    f"cannot read {shorten(node.value)!r}: {exc}",
                    "correct the value, or quote it to keep it as text",
                )
            )
            return None
        if isinstance(value, int) and not isinstance(value, bool) and not -INT_LIMIT <= value < INT_LIMIT:
            return self._bad_number(node, path, "an integer outside the 64-bit range")
        return value

    def _bad_number(self, node: yaml.ScalarNode, path: Path_, what: str) -> None:
        self.problems.append(
            self._problem(
                node.start_mark,
                path,
                f"{shorten(node.value)!r} is {what}",
                "write a number that fits in 64 bits, or quote the value if it is text",
            )
        )

    def _problem(self, mark: yaml.Mark, path: Path_, message: str, fix: str) -> DocumentProblem:
        line = mark.line + 1
        return DocumentProblem(
            self.file, line, mark.column + 1, field_name(path), message, fix, source_line(self.lines, line)
        )

    def _position(self, mark: yaml.Mark) -> Position:
        return Position(self.file, mark.line + 1, mark.column + 1)


def shorten(text: str, limit: int = 40) -> str:
    """`text`, cut to `limit` characters for a message."""
    return text if len(text) <= limit else text[:limit] + "..."
