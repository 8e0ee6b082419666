"""Operator reviews of incidents: "was Recover's decision the right one, and what did you do?"

A review is a verdict (``agree`` or ``disagree``) on one closed incident's decision, what the
operator actually did, who, and when. The latest review of an incident counts. Reviews come
from ``recover review N --agree`` or in bulk from a ticket system's export (``--import FILE``):
a JSON list of objects, JSON lines, or CSV with the columns ``incident,verdict,did,by[,at]``.
Bad rows are reported with their line numbers; the good ones are imported.

Usage::

    rows, problems = parse_import(text, "tickets.csv")
    result = import_reviews(store, rows)       # -> ImportResult(imported, duplicates, rejected)

Errors::

    ReviewError          a verdict, incident, or time that cannot be used (message says why)
"""

from __future__ import annotations
from engine.errors import ReviewError

import csv
import io
import json
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator

from engine.facts import clean_text
from engine.store import Store

logger = logging.getLogger(__name__)

__all__ = [
    "ReviewError",
    "ReviewRow",
    "ImportProblem",
    "ImportResult",
    "parse_verdict",
    "parse_incident_id",
    "parse_time",
    "parse_import",
    "check_row",
    "import_reviews",
    "record_review",
    "latest_reviews",
    "COLUMNS",
]

COLUMNS = ("incident", "verdict", "did", "by", "at")
REQUIRED = ("incident", "verdict")
_AGREE = {"agree", "agreed", "agrees", "yes", "y", "true", "1", "ok", "correct", "right", "+1"}
_DISAGREE = {"disagree", "disagreed", "disagrees", "no", "n", "false", "0", "wrong", "incorrect", "-1"}
MAX_DID = 1000
MAX_BY = 128


@dataclass(frozen=True)
class ReviewRow:
    line: int
    incident: int
    verdict: str  # agree | disagree
    did: str | None
    by: str | None
    at: float | None


@dataclass(frozen=True)
class ImportProblem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class ImportResult:
    imported: list[ReviewRow] = field(default_factory=list)
    duplicates: list[ReviewRow] = field(default_factory=list)
    rejected: list[ImportProblem] = field(default_factory=list)


def parse_verdict(value: Any) -> str:
    text = str(value).strip().lower() if value is not None else ""
    if isinstance(value, bool):
        return "agree" if value else "disagree"
    if text in _AGREE:
        return "agree"
    if text in _DISAGREE:
        return "disagree"
    raise ReviewError(f"verdict {value!r} is neither agree nor disagree")


def parse_incident_id(value: Any) -> int:
    if isinstance(value, bool):
        raise ReviewError(f"incident {value!r} is not an incident id")
    if isinstance(value, int):
        n = value
    else:
        text = str(value if value is not None else "").strip()
        for prefix in ("INC-", "inc-", "#"):
            text = text.removeprefix(prefix)
        if not text.isdigit():
            raise ReviewError(f"incident {value!r} is not an incident id (e.g. 12, INC-12)")
        n = int(text)
    if n <= 0:
        raise ReviewError(f"incident {value!r} is not an incident id")
    return n


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch, or an ISO 8601 date/time (naive times are UTC); empty -> None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ReviewError(f"time {value!r} is not a time")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise ReviewError(f"time {value!r} is not a time")
        return float(value)
    text = str(value).strip()
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else _iso(text)
    except ValueError:
        raise ReviewError(f"time {value!r} is neither epoch seconds nor ISO 8601 (e.g. 2026-11-29T17:05:00Z)") from None


def _iso(text: str) -> float:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def check_row(raw: dict[str, Any], line: int) -> ReviewRow:
    """One imported record -> ReviewRow (store checks come later)."""
    unknown = [k for k in raw if k not in COLUMNS]
    if unknown:
        raise ReviewError(f"unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(COLUMNS)})")
    for key in REQUIRED:
        if raw.get(key) in (None, ""):
            raise ReviewError(f"{key} is missing")
    did = raw.get("did")
    by = raw.get("by")
    for name, value in (("did", did), ("by", by)):
        if value is not None and not isinstance(value, (str, int, float)):
            raise ReviewError(f"{name} must be text")
    return ReviewRow(
        line=line,
        incident=parse_incident_id(raw["incident"]),
        verdict=parse_verdict(raw["verdict"]),
        did=clean_text(str(did), MAX_DID).strip() or None if did not in (None, "") else None,
        by=clean_text(str(by), MAX_BY).strip() or None if by not in (None, "") else None,
        at=parse_time(raw.get("at")),
    )


# -- file formats --------------------------------------------------------------------------------
def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _json_array(text: str) -> Iterator[tuple[int, Any]]:
    """(line, element) of a JSON array, so each element can be reported at its own line."""
    dec = json.JSONDecoder()
    ws = " \t\r\n"
    i = len(text) - len(text.lstrip(ws))
    i += 1  # the '['
    while True:
        while i < len(text) and text[i] in ws:
            i += 1
        if i < len(text) and text[i] == "]":
            return
        value, end = dec.raw_decode(text, i)
        yield _line_of(text, i), value
        i = end
        while i < len(text) and text[i] in ws:
            i += 1
        if i < len(text) and text[i] == ",":
            i += 1
        elif i < len(text) and text[i] == "]":
            return
        else:
            raise json.JSONDecodeError("expected ',' or ']'", text, i)


def _json_lines(text: str) -> Iterator[tuple[int, Any, str | None]]:
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line), None
        except ValueError as exc:
            yield n, None, f"not JSON: {exc.msg if isinstance(exc, json.JSONDecodeError) else exc}"


def _csv_rows(text: str) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    start = 1
    for row in reader:
        line = start
        start = reader.line_num + 1
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip().lower() for h in row]
            unknown = [h for h in header if h not in COLUMNS]
            missing = [h for h in REQUIRED if h not in header]
            if unknown or missing:
                why = []
                if missing:
                    why.append(f"missing column(s) {', '.join(missing)}")
                if unknown:
                    why.append(f"unknown column(s) {', '.join(map(repr, unknown))}")
                raise ReviewError(
                    f"line {line}: the header has {'; '.join(why)} (columns: incident,verdict,did,by[,at])"
                )
            continue
        if len(row) != len(header):
            yield line, None, f"{len(row)} field(s), the header has {len(header)}"
            continue
        yield line, {h: (v if v.strip() else None) for h, v in zip(header, row)}, None


def parse_import(text: str, name: str = "input") -> tuple[list[ReviewRow], list[ImportProblem]]:
    """Parse a ticket export. A file that cannot be read at all raises ReviewError."""
    if text.startswith("\ufeff"):
        text = text[1:]
    stripped = text.lstrip()
    rows: list[ReviewRow] = []
    problems: list[ImportProblem] = []

    def take(line: int, raw: Any) -> None:
        if not isinstance(raw, dict):
            problems.append(ImportProblem(line, "not an object with incident, verdict, did, by, at"))
            return
        try:
            rows.append(check_row(raw, line))
        except ReviewError as exc:
            problems.append(ImportProblem(line, str(exc)))

    if not stripped:
        raise ReviewError(f"{name}: empty file")
    if stripped[0] == "[":
        try:
            for line, raw in _json_array(text):
                take(line, raw)
        except json.JSONDecodeError as exc:
            raise ReviewError(f"{name}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}; nothing imported") from None
    elif stripped[0] == "{":
        for line, raw, problem in _json_lines(text):
            if problem:
                problems.append(ImportProblem(line, problem))
            else:
                take(line, raw)
    else:
        try:
            for line, raw, problem in _csv_rows(text):
                if problem:
                    problems.append(ImportProblem(line, problem))
                else:
                    take(line, raw)
        except csv.Error as exc:
            raise ReviewError(f"{name}: not valid CSV: {exc}") from None
        except ReviewError as exc:
            raise ReviewError(f"{name}: {exc}") from None
    return rows, problems


# -- the store -------------------------------------------------------------------------------
def _usable(store: Store, incident: int) -> str | None:
    row = store.incident(incident)
    if row is None:
        return f"no incident {incident} in {store.path}"
    if row.status != "closed":
        return f"incident {incident} is still open: review it once it has a decision"
    return None


def record_review(
    store: Store, incident: int, verdict: str, did: str | None, by: str | None, at: float | None = None
) -> int:
    """Record one review; ReviewError when the incident cannot be reviewed."""
    verdict = parse_verdict(verdict)
    problem = _usable(store, incident)
    if problem:
        raise ReviewError(problem)
    did = clean_text(did, MAX_DID).strip() or None if did else None
    by = clean_text(by, MAX_BY).strip() or None if by else None
    rid = store.add_review(incident, verdict, did, by, at)
    logger.info("review %d: incident %d %s by %s", rid, incident, verdict, by or "-")
    return rid


def import_reviews(store: Store, rows: list[ReviewRow]) -> ImportResult:
    """Store the rows that name a reviewable incident, in one transaction; the same review
    imported twice (same incident, verdict, did, by and time) is kept once."""
    result = ImportResult()
    existing = {(r["incident"], r["verdict"], r["did"], r["by"]) for r in store.reviews()}
    existing_at = {(r["incident"], r["verdict"], r["did"], r["by"], float(r["at"])) for r in store.reviews()}
    now = store.clock.wall()
    with store.transaction():
        for row in rows:
            problem = _usable(store, row.incident)
            if problem:
                result.rejected.append(ImportProblem(row.line, problem))
                continue
            key = (row.incident, row.verdict, row.did, row.by)
            if (row.at is not None and key + (row.at,) in existing_at) or (row.at is None and key in existing):
                result.duplicates.append(row)
                continue
            store.add_review(row.incident, row.verdict, row.did, row.by, row.at if row.at is not None else now)
            existing.add(key)
            if row.at is not None:
                existing_at.add(key + (row.at,))
            result.imported.append(row)
    result.rejected.sort(key=lambda p: p.line)
    return result


def latest_reviews(store: Store) -> dict[int, dict[str, Any]]:
    """incident -> its latest review (by time, then by the order they were recorded)."""
    out: dict[int, dict[str, Any]] = {}
    for r in sorted(store.reviews(), key=lambda r: (float(r["at"]), int(r["id"]))):
        out[int(r["incident"])] = r
    return out
