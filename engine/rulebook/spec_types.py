"""The type objects the rulebook's declarative spec (``spec.py``) is written in.

Each type knows its JSON Schema (``schema()``), the validator's test of a value (``bad(v)``, used
where a key is checked by type alone, as the policy guards' settings are) and the words for what
it expects (``want``), so the validator's message and the schema come from one declaration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "Type",
    "Int",
    "Num",
    "Bool",
    "Str",
    "Dur",
    "Enum",
    "ListOf",
    "MapOf",
    "Obj",
    "Raw",
    "Override",
    "parse_duration",
    "ref",
    "SCALAR",
    "ID_PATTERN",
    "ALIAS_PATTERN",
    "DUR_PATTERN",
]

ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}$"
ALIAS_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,31}$"
DUR_PATTERN = r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m(?!s))?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*(?:(\d+(?:\.\d+)?)\s*ms)?\s*$"
_DUR_RE = re.compile(DUR_PATTERN)
SCALAR: dict[str, Any] = {"type": ["string", "number", "integer", "boolean"]}


def parse_duration(value: Any) -> float | None:
    """'90s', '10m', '1h30m', '250ms', or a number of seconds -> seconds; None if invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else None
    if not isinstance(value, str) or not value.strip():
        return None
    m = _DUR_RE.match(value)
    if not m or not any(m.groups()):
        return None
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


# -- the type objects ---------------------------------------------------------------------------
# ``schema()`` is the JSON Schema of a value; ``bad(v)`` is the validator's test of it (used for
# the policy guards' settings, which are checked by type alone); ``want`` says what is expected.


@dataclass(frozen=True)
class Type:
    description: str = ""

    want = "a value"

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def bad(self, v: Any) -> bool:
        return False

    def _described(self, out: dict[str, Any]) -> dict[str, Any]:
        return {**out, "description": self.description} if self.description else out


@dataclass(frozen=True)
class Int(Type):
    minimum: int | None = 0

    @property
    def want(self) -> str:  # type: ignore[override]
        return "a whole number" + (f" >= {self.minimum}" if self.minimum is not None else "")

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "integer"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        return self._described(out)

    def bad(self, v: Any) -> bool:
        return isinstance(v, bool) or not isinstance(v, int) or (self.minimum is not None and v < self.minimum)


@dataclass(frozen=True)
class Num(Type):
    want = "a number >= 0"

    def schema(self) -> dict[str, Any]:
        return self._described({"type": "number", "minimum": 0})

    def bad(self, v: Any) -> bool:
        return isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0


@dataclass(frozen=True)
class Bool(Type):
    want = "true or false"

    def schema(self) -> dict[str, Any]:
        return self._described({"type": "boolean"})

    def bad(self, v: Any) -> bool:
        return not isinstance(v, bool)


@dataclass(frozen=True)
class Str(Type):
    pattern: str | None = None

    want = "a string"

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.pattern:
            out["pattern"] = self.pattern
        return self._described(out)

    def bad(self, v: Any) -> bool:
        return not isinstance(v, str) or (self.pattern is not None and not re.match(self.pattern, v))


@dataclass(frozen=True)
class Dur(Type):
    """A duration: seconds, or 90s, 10m, 1h30m, 250ms. ``nullable``: null means "not set"."""

    nullable: bool = False

    want = "a duration such as 90s or 10m"

    def schema(self) -> dict[str, Any]:
        if self.nullable:
            return self._described({"anyOf": [ref("duration"), {"type": "null"}]})
        return self._described(ref("duration")) if self.description else ref("duration")

    def bad(self, v: Any) -> bool:
        return not (v is None and self.nullable) and parse_duration(v) is None


@dataclass(frozen=True)
class Enum(Type):
    values: tuple[Any, ...] = ()
    want_text: str = ""

    @property
    def want(self) -> str:  # type: ignore[override]
        return self.want_text or "one of " + ", ".join(map(str, self.values))

    def schema(self) -> dict[str, Any]:
        return self._described({"enum": list(self.values)})

    def bad(self, v: Any) -> bool:  # by type too: 1 is not true, and true is not 1
        return not any(v == x and type(v) is type(x) for x in self.values)


@dataclass(frozen=True)
class ListOf(Type):
    item: Type = field(default_factory=lambda: Raw(schema_=SCALAR))
    min_items: int | None = None
    want_text: str = ""

    @property
    def want(self) -> str:  # type: ignore[override]
        return self.want_text or "a list"

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array", "items": self.item.schema()}
        if self.min_items is not None:
            out["minItems"] = self.min_items
        return self._described(out)

    def bad(self, v: Any) -> bool:
        return not isinstance(v, list) or any(self.item.bad(x) for x in v)


@dataclass(frozen=True)
class MapOf(Type):
    """name -> value. ``per_entry``: the validator reports each bad entry on its own line."""

    value: Type = field(default_factory=lambda: Raw(schema_=SCALAR))
    keys: Type | None = None
    want_text: str = ""
    per_entry: bool = False

    @property
    def want(self) -> str:  # type: ignore[override]
        return self.want_text or "a mapping"

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object"}
        if self.keys is not None:
            names = self.keys.schema()
            out["propertyNames"] = {k: v for k, v in names.items() if k in ("pattern", "enum")}
        out["additionalProperties"] = self.value.schema()
        return self._described(out)

    def bad(self, v: Any) -> bool:
        return not isinstance(v, dict) or any(self.value.bad(x) for x in v.values())


@dataclass(frozen=True)
class Raw(Type):
    """A JSON Schema fragment for what the validator checks in code (where-clauses, then)."""

    schema_: Mapping[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        return self._described(dict(self.schema_))


@dataclass(frozen=True)
class Override(Type):
    """``override:`` of an item: true, replace, or field -> replace|append over its own keys."""

    description: str = (
        "This item changes one an earlier file defined: true (replace the fields given) or field -> replace|append."
    )

    def schema_for(self, fields: tuple[str, ...]) -> dict[str, Any]:
        return self._described(
            {
                "oneOf": [
                    {"const": True},
                    {"const": "replace"},
                    {
                        "type": "object",
                        "propertyNames": {"enum": list(fields)},
                        "additionalProperties": {"enum": ["replace", "append"]},
                    },
                ]
            }
        )

    def schema(self) -> dict[str, Any]:
        return self.schema_for(())


@dataclass(frozen=True)
class Obj(Type):
    """A closed mapping: exactly these keys, in this order (the order the validator lists them)."""

    props: Mapping[str, Type] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    any_of: tuple[tuple[str, ...], ...] = ()  # one of these sets of keys must all be present

    want = "a mapping"

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.props)

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object"}
        if self.description:
            out["description"] = self.description
        out["properties"] = {
            k: t.schema_for(self.keys) if isinstance(t, Override) else t.schema() for k, t in self.props.items()
        }
        out["additionalProperties"] = False
        if self.required:
            out["required"] = list(self.required)
        if self.any_of:
            out["anyOf"] = [{"required": list(keys)} for keys in self.any_of]
        return out

    def bad(self, v: Any) -> bool:
        return not isinstance(v, dict) or any(k not in self.props or self.props[k].bad(x) for k, x in v.items())
