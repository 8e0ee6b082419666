"""Store.save_offsets (the controller's commit: every moved file's position in one statement)
writes what save_offset of each row writes, on SQLite and on PostgreSQL: a new row, an update,
and a head kept when the row brings none."""

from __future__ import annotations

from engine.store import Store


def test_save_offsets_writes_what_save_offset_writes(db_target):
    s = Store(db_target)
    try:
        s.save_offset("/logs/a.out", 7, 100, 3, head="256:aa")
        with s.transaction():
            s.save_offsets([("/logs/a.out", 7, 150, 4, None), ("/logs/b.out", 2**40 + 7, 2**40 + 9, 12, "12:bb")])
        s.save_offsets([])
        assert s.offsets() == {"/logs/a.out": (7, 150, 4), "/logs/b.out": (2**40 + 7, 2**40 + 9, 12)}
        assert s.offset_heads() == {"/logs/a.out": "256:aa", "/logs/b.out": "12:bb"}
    finally:
        s.close()
