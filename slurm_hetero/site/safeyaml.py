"""Read a site file's YAML on a budget: nesting, values, aliases, tags, numbers.
(load.py caps the file's bytes and decodes them as strict UTF-8 first.)

PyYAML's safe loader builds no Python objects from tags, but it still lets a 1 KiB file
expand (aliases of aliases: "billion laughs"), nest until the interpreter's recursion
limit, or carry values that only fail later (`.inf`, 5000-digit integers). Every limit
here is checked while the document is composed, so the work done is bounded by the limit,
and every refusal says where (line, column, field path) and what is allowed.

>>> doc = compose_limited("a: &x [1, 2]\\nb: *x\\n")
>>> construct(doc.node)
{'a': [1, 2], 'b': [1, 2]}
>>> doc.values  # 1 mapping + 2 keys + 1 list + 2 items, and the alias's 3 again
9
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from slurm_hetero.site.limits import (
    MAX_NUMBER_CHARS,
    MAX_SCALAR_CHARS,
    MAX_YAML_ALIASES,
    MAX_YAML_DEPTH,
    MAX_YAML_VALUES,
    shown,
)

Path_ = tuple[str | int, ...]
_CORE = "tag:yaml.org,2002:"
# Tags a site file may write explicitly (`!!str 12`); everything else (`!!python/...`,
# `!!binary`, `!!set`, local `!foo`) is refused before anything is constructed.
EXPLICIT_TAGS = frozenset(_CORE + t for t in ("str", "int", "float", "bool", "null", "seq", "map"))
# Tags plain YAML resolves to by itself (`2024-05-01` is a timestamp, `<<` a merge key).
IMPLICIT_TAGS = EXPLICIT_TAGS | {_CORE + "timestamp", _CORE + "merge", _CORE + "value"}
TAG_HINT = "plain YAML only: strings, numbers, booleans, lists and mappings (no !! or ! tags)"


def short_tag(tag: str) -> str:
    """`tag:yaml.org,2002:python/name:os.system` as written: `!!python/name:os.system`."""
    return "!!" + tag[len(_CORE):] if tag.startswith(_CORE) else tag


class YamlLimitError(Exception):
    """One refusal: where (path and 1-based line/column), what, and what is allowed."""

    def __init__(self, path: Path_, line: int, column: int, message: str, hint: str = ""):
        super().__init__(message)
        self.path, self.line, self.column = path, line, column
        self.message, self.hint = message, hint


def _at(mark: Any, path: Path_, message: str, hint: str = "") -> YamlLimitError:
    return YamlLimitError(path, mark.line + 1 if mark else 0, mark.column + 1 if mark else 0,
                          message, hint)


@dataclass(frozen=True)
class LimitedDocument:
    node: yaml.Node | None
    values: int  # what the document expands to (each alias counted as what it repeats)
    aliases: int


class _BudgetLoader(yaml.SafeLoader):
    """A SafeLoader whose composer counts and refuses as it goes."""

    def __init__(self, text: str):
        super().__init__(text)
        self.path: list[str | int] = []
        self.depth = 0
        self.values = 0
        self.aliases = 0
        # id(node) -> (values it expands to, levels it nests): what an alias to it costs.
        self.shapes: dict[int, tuple[int, int]] = {}

    def _spend(self, n: int, mark: Any) -> None:
        self.values += n
        if self.values > MAX_YAML_VALUES:
            raise _at(mark, self._where_key(),
                      f"the document expands to more than {MAX_YAML_VALUES} values",
                      f"at most {MAX_YAML_VALUES} scalars, lists and mappings, aliases (*name) "
                      "counted as what they repeat")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if isinstance(index, int) and not isinstance(index, bool):
            self.path.append(index)
        elif isinstance(index, yaml.ScalarNode):
            self.path.append(str(index.value))
        else:
            self.path.append("")  # a key, or the root: not part of the field path
        try:
            return self._compose(parent, index)
        finally:
            self.path.pop()

    def _where_key(self) -> Path_:
        return tuple(p for p in self.path if p != "")

    def _compose(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        where = self._where_key()
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                raise _at(event.start_mark, where, f"more than {MAX_YAML_ALIASES} aliases (*name)",
                          f"at most {MAX_YAML_ALIASES}")
            node = super().compose_node(parent, index)
            shape = self.shapes.get(id(node))
            if shape is None:
                raise _at(event.start_mark, where,
                          f"alias *{event.anchor} is used inside its own anchor &{event.anchor}",
                          "a site file cannot describe a recursive structure")
            size, height = shape
            if self.depth + height > MAX_YAML_DEPTH:
                raise _at(event.start_mark, where,
                          f"alias *{event.anchor} nests values more than {MAX_YAML_DEPTH} levels deep",
                          f"at most {MAX_YAML_DEPTH} levels of lists and mappings")
            self._spend(size, event.start_mark)
            return node
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and tag not in EXPLICIT_TAGS:
            raise _at(event.start_mark, where, f"YAML tag {shown(short_tag(tag))} is not allowed", TAG_HINT)
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_SCALAR_CHARS:
            raise _at(event.start_mark, where,
                      f"a value of {len(event.value)} characters is too long",
                      f"at most {MAX_SCALAR_CHARS} characters per value")
        self.depth += 1
        if self.depth > MAX_YAML_DEPTH:
            raise _at(event.start_mark, where, f"values nest more than {MAX_YAML_DEPTH} levels deep",
                      f"at most {MAX_YAML_DEPTH} levels of lists and mappings (a site file needs 6)")
        before = self.values
        self._spend(1, event.start_mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if node is None:
            return None
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        height = 1 + max((self.shapes[id(c)][1] for c in children), default=0)
        self.shapes[id(node)] = (self.values - before, height)
        return node


class _Refused(ValueError):
    """A value plain YAML can build but a site file never holds."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


_NUMBER_HINT = "every number a site file needs is far smaller"


def _finite_float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    assert isinstance(node, yaml.ScalarNode)
    value: float = loader.construct_yaml_float(node)
    if not math.isfinite(value):
        raise _Refused(f"{shown(node.value)} is not a finite number", "no .inf or .nan: " + _NUMBER_HINT)
    return value


def _bounded_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    assert isinstance(node, yaml.ScalarNode)
    if len(node.value) > MAX_NUMBER_CHARS:
        raise _Refused(f"a number of {len(node.value)} characters is too large",
                       f"at most {MAX_NUMBER_CHARS} characters: {_NUMBER_HINT}")
    value: int = loader.construct_yaml_int(node)
    if abs(value) >= 2**63:  # 1:2:3 (base 60) and 0x... grow fast: keep every integer printable
        raise _Refused(f"{shown(node.value)} is too large a number",
                       "integers are below 2**63: " + _NUMBER_HINT)
    return value


def _plain_str(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    return str(node.value)  # `=` (YAML 1.1's value key) is just the string "="


class _ValueFailure(yaml.YAMLError):
    def __init__(self, node: yaml.Node, message: str, hint: str):
        super().__init__(message)
        self.node, self.message, self.hint = node, message, hint


class _Constructor(yaml.SafeLoader):
    """Builds plain data from composed nodes; a value that cannot be built names its node."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except _Refused as e:
            raise _ValueFailure(node, str(e), e.hint) from e
        except (ValueError, TypeError, OverflowError) as e:  # e.g. 2024-13-45 read as a date
            raise _ValueFailure(node, f"cannot read {shown(getattr(node, 'value', ''))}: {e}",
                                "quote it to make it a string") from e


_Constructor.add_constructor(_CORE + "float", _finite_float)
_Constructor.add_constructor(_CORE + "int", _bounded_int)
_Constructor.add_constructor(_CORE + "value", _plain_str)


def compose_limited(text: str) -> LimitedDocument:
    """Compose one YAML document within the limits; raises YamlLimitError or yaml.YAMLError."""
    loader = _BudgetLoader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    return LimitedDocument(node, loader.values, loader.aliases)


def construct(node: yaml.Node | None) -> Any:
    """Plain Python data of a composed (and checked) node.

    Raises yaml.YAMLError; a value that cannot be built (`!!int x`, `2024-13-45`, `.inf`)
    raises one whose `node` attribute is the node at fault.
    """
    if node is None:
        return None
    c = _Constructor("")
    return c.construct_document(node)


def value_failure(e: BaseException) -> tuple[yaml.Node, str, str] | None:
    """(node, message, hint) when `e` is a value construct() could not build."""
    return (e.node, e.message, e.hint) if isinstance(e, _ValueFailure) else None
