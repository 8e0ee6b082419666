"""Where each followed source was read up to (offsets), and the store's own settings (meta)."""

from __future__ import annotations


from typing import Sequence

from engine.store.connection import Connection

__all__ = ["CursorTables"]


_SAVE_OFFSET = (
    'INSERT INTO offsets(source, inode, "offset", line_no, updated_at, head) VALUES (?,?,?,?,?,?) '
    'ON CONFLICT(source) DO UPDATE SET inode=excluded.inode, "offset"=excluded."offset", line_no=excluded.line_no, '
    "updated_at=excluded.updated_at, head=COALESCE(excluded.head, offsets.head)"
)


class CursorTables(Connection):
    """offsets, meta."""

    def save_offsets(self, rows: Sequence[tuple[str, int | None, int, int, str | None]]) -> None:
        """``save_offset`` of each (source, inode, offset, line_no, head), in one statement (the
        controller's commit saves every file whose position moved: one statement each cost ~20 us
        a file at 10,000 followed logs)."""
        if not rows:
            return
        now = self.clock.wall()
        self._execmany(_SAVE_OFFSET, [(src, ino, off, line, now, head) for src, ino, off, line, head in rows])

    def save_offset(self, source: str, inode: int | None, offset: int, line_no: int, head: str | None = None) -> None:
        """``head``: a fingerprint of the file's first bytes, so that a new file that got the old
        one's inode number is not taken for it after a restart."""
        self._exec(_SAVE_OFFSET, (source, inode, offset, line_no, self.clock.wall(), head))

    def offsets(self) -> dict[str, tuple[int | None, int, int]]:
        return {r["source"]: (r["inode"], r["offset"], r["line_no"]) for r in self._exec("SELECT * FROM offsets")}

    def offset_heads(self) -> dict[str, str]:
        return {r["source"]: r["head"] for r in self._exec("SELECT source, head FROM offsets WHERE head IS NOT NULL")}

    def meta(self, key: str) -> str | None:
        row = self._exec("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._exec(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )
