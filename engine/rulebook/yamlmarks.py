"""YAML with marks: plain dicts/lists/scalars that remember where each node was written.

``load_marked(text, path)`` returns a ``MDict``/``MList``/scalar tree; every container has
``.mark`` (its own position) and ``.key_marks`` / ``.item_marks`` (the position of each key's
value), so validation can point at ``file:line:col``. Lines and columns are 1-based.
Duplicate keys are reported (PyYAML silently keeps the last one). Aliases are expanded, but the
size of the expanded tree is computed first, in time linear in the file (``MAX_NODES``): a
"billion laughs" file of nested aliases is refused at once, pointing at the anchor whose expansion
crossed the bound, instead of being built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where YAML is parsed: a rulebook read back from the cache needs none
    import yaml

__all__ = ["Mark", "MDict", "MList", "load_marked", "YamlProblem", "mark_of"]


@dataclass(frozen=True)
class Mark:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class MDict(dict):
    mark: Mark
    key_marks: dict[str, Mark]


class MList(list):
    mark: Mark
    item_marks: list[Mark]


@dataclass(frozen=True)
class YamlProblem:
    mark: Mark
    code: str
    message: str


def _mark(node: yaml.Node, path: str) -> Mark:
    return Mark(path, node.start_mark.line + 1, node.start_mark.column + 1)


_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")
#: the most nodes one file may expand to; the largest shipped file has a few thousand
MAX_NODES = 200_000


def _too_big(root: yaml.Node) -> yaml.Node | None:
    """The first node whose expansion (aliases counted each time) exceeds MAX_NODES, else None.

    Composed aliases are the same node object, so sizes are memoized by identity: linear time."""
    import yaml

    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        size = 1 + sum(sizes.get(id(c), 1) for c in children)
        if size > MAX_NODES and all(sizes.get(id(c), 1) <= MAX_NODES for c in children):
            return node
        sizes[id(node)] = min(size, MAX_NODES + 1)
    return None


#: a scalar of this tag is its text as written (PyYAML's ``construct_yaml_str``), built without
#: the constructor's bookkeeping: most of a rulebook's nodes are strings
_STR_TAG = "tag:yaml.org,2002:str"


class _Builder:
    def __init__(self, path: str):
        self.path = path
        import yaml

        self.problems: list[YamlProblem] = []
        self._scalar_loader = yaml.SafeLoader("")

    def mark(self, node: yaml.Node) -> Mark:
        m = node.start_mark
        return Mark(self.path, m.line + 1, m.column + 1)

    def build(self, node: yaml.Node) -> Any:
        """The value of ``node`` (None where a problem was found, recorded in ``problems``)."""
        kind: str = node.id  # type: ignore[attr-defined]  # "scalar", "mapping" or "sequence": each class names itself
        if kind == "scalar" and node.tag == _STR_TAG:
            return node.value
        return self._build(node, kind, self.mark(node))[0]

    def _build(self, node: yaml.Node, kind: str, mark: Mark) -> tuple[Any, Mark]:
        """(the value of ``node``, its mark): a container's mark is its value's ``.mark`` and the
        mark its parent records for it, made once."""
        import yaml

        if kind != "scalar" and node.tag not in _PLAIN_TAGS:
            self.problems.append(YamlProblem(mark, "E-YAML", f"YAML tag {node.tag!r} is not allowed in a rulebook"))
            return None, mark
        if kind == "mapping":
            out = MDict()
            out.mark = mark
            key_marks: dict[str, Mark] = {}
            out.key_marks = key_marks
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    self.problems.append(
                        YamlProblem(self.mark(key_node), "E-YAML", "YAML merge keys (<<) are not supported; use macros")
                    )
                    continue
                key = self.build(key_node)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    self.problems.append(YamlProblem(self.mark(key_node), "E-YAML", "mapping keys must be scalars"))
                    continue
                key = str(key) if not isinstance(key, str) else key
                if key in out:
                    self.problems.append(
                        YamlProblem(
                            self.mark(key_node),
                            "E-DUPKEY",
                            f"duplicate key {key!r} (the first is at line {key_marks[key].line})",
                        )
                    )
                    continue
                value_kind = value_node.id
                if value_kind == "scalar" and value_node.tag == _STR_TAG:
                    out[key] = value_node.value
                    key_marks[key] = self.mark(value_node)
                else:
                    out[key], key_marks[key] = self._build(value_node, value_kind, self.mark(value_node))
            return out, mark
        if kind == "sequence":
            out_l = MList()
            out_l.mark = mark
            item_marks: list[Mark] = []
            out_l.item_marks = item_marks
            for item in node.value:
                item_kind = item.id
                if item_kind == "scalar" and item.tag == _STR_TAG:
                    out_l.append(item.value)
                    item_marks.append(self.mark(item))
                else:
                    value, item_mark = self._build(item, item_kind, self.mark(item))
                    out_l.append(value)
                    item_marks.append(item_mark)
            return out_l, mark
        # other scalars: let PyYAML's safe constructor resolve types (int, float, bool, null, ...)
        try:
            return self._scalar_loader.construct_object(node, deep=True), mark
        except yaml.YAMLError as exc:
            self.problems.append(YamlProblem(mark, "E-YAML", str(exc).splitlines()[0]))
            return None, mark


def _compose(text: str) -> Any:
    import yaml

    # libyaml's composer is ~10x faster than PyYAML's and gives the same nodes and marks; a text
    # it refuses is parsed again by PyYAML, so that error messages stay those of one parser
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return yaml.compose(text, Loader=fast)
        except (yaml.YAMLError, ValueError, TypeError):  # PyYAML's own loader words the error for the user
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


#: where an anchor (``&name``) or an alias (``*name``) may stand: a node follows a line start, a
#: space or a flow indicator, and a name follows the ``&`` or ``*``. Elsewhere ("AT&T", "a & b"
#: in a quoted log line) it is text; one these find in a quoted string only costs the walk
_ANCHOR = re.compile(r"(?:^|[\s\[\]{},:?-])&[^\s\[\]{},]", re.MULTILINE)
_ALIAS = re.compile(r"(?:^|[\s\[\]{},:?-])\*[^\s\[\]{},]", re.MULTILINE)


def load_marked(text: str, path: str) -> tuple[Any, list[YamlProblem]]:
    """Parse one YAML document. Returns (tree or None, problems)."""
    import yaml

    try:
        node = _compose(text)
    except yaml.MarkedYAMLError as exc:
        m = exc.problem_mark or exc.context_mark
        mark = Mark(path, m.line + 1, m.column + 1) if m else Mark(path, 1, 1)
        msg = exc.problem or str(exc)
        if exc.context:
            msg = f"{exc.context}: {msg}"
        return None, [YamlProblem(mark, "E-YAML", f"invalid YAML: {msg}")]
    except yaml.YAMLError as exc:  # e.g. more than one document
        return None, [YamlProblem(Mark(path, 1, 1), "E-YAML", f"invalid YAML: {str(exc).splitlines()[0]}")]
    except (ValueError, UnicodeError) as exc:
        return None, [YamlProblem(Mark(path, 1, 1), "E-YAML", f"invalid YAML: {exc}")]
    if node is None:
        return None, []
    # without an anchor there is no alias, and every node but an empty value takes at least one
    # character of the text: a short text cannot expand to MAX_NODES (the walk below was a
    # quarter of parsing the shipped rulebook)
    big = _too_big(node) if (_ALIAS.search(text) and _ANCHOR.search(text)) or 2 * len(text) + 1 > MAX_NODES else None
    if big is not None:
        return None, [
            YamlProblem(
                _mark(big, path),
                "E-YAML",
                f"this node expands to more than {MAX_NODES} YAML nodes through aliases (an alias bomb?)",
            )
        ]
    builder = _Builder(path)
    return builder.build(node), builder.problems


def mark_of(container: Any, key: Any = None, default: Mark | None = None) -> Mark:
    """The mark of ``container[key]`` (or of the container when key is None)."""
    if key is not None:
        if isinstance(container, MDict) and key in container.key_marks:
            return container.key_marks[key]
        if isinstance(container, MList) and isinstance(key, int) and 0 <= key < len(container.item_marks):
            return container.item_marks[key]
    m = getattr(container, "mark", None)
    if m is not None:
        return m
    return default or Mark("?", 0, 0)
