"""Loaded rulebooks kept on disk: loading the same files again is one read and one unpickle.

A load is a pure function of its inputs, and the key covers all of them: each file's name as
shown and its bytes, the overlays, whether the defaults were loaded, the source of Recover
itself (every ``.py`` of ``engine/`` and ``scheduler_adapters/``, so an edited compiler is never
served an old result) and the versions of Python and the libraries (``engine.cache``). An
entry that cannot be read back is ignored and rebuilt. Jinja templates are stored as their
source and compiled on first render, by the Jinja version that checked them when the entry was
built (it is part of the key).

Usage::

    k = stored.key(named_texts, overlays, defaults)
    result = stored.get(k)
    if result is None:
        result = build()
        stored.put(k, result)
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import logging
import pickle
from types import MappingProxyType
from typing import Sequence

from engine import cache  # the on-disk store and the library versions
from engine.rulebook.compile import LoadResult

logger = logging.getLogger(__name__)

__all__ = ["key", "get", "put"]


def key(
    named_texts: Sequence[tuple[str, str]], overlays: Sequence[tuple[str, str]], defaults: bool, tests: bool = True
) -> str:
    """The cache key of loading these (shown name, text) files and overlays, with or without
    their tests (``load_rulebook``'s ``tests``)."""
    digest = hashlib.sha256()
    for name, text in (*named_texts, ("--overlays--", ""), *overlays):
        data = text.encode("utf-8", "surrogateescape")
        digest.update(f"{name}\0{len(data)}\0".encode("utf-8", "surrogateescape"))
        digest.update(data)
    return cache.key(
        "rulebook",
        digest.hexdigest(),
        len(named_texts),
        len(overlays),
        bool(defaults),
        bool(tests),
        cache.code_version(),
    )


def _read_only(d: dict) -> MappingProxyType:
    return MappingProxyType(d)


def _dispatch() -> dict:
    table = copyreg.dispatch_table.copy()
    table[MappingProxyType] = lambda m: (_read_only, (dict(m),))
    return table


def get(k: str) -> LoadResult | None:
    data = cache.get(k)
    if data is None:
        return None
    try:
        result = pickle.loads(data)
    except Exception as exc:  # damaged, truncated or written by other code: build it again
        logger.debug("rulebook cache entry %s unusable: %s", k, exc)
        return None
    return result if isinstance(result, LoadResult) else None


def put(k: str, result: LoadResult) -> None:
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _dispatch()
    try:
        pickler.dump(result)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:  # pragma: no cover
        logger.debug("rulebook not cached: %s", exc)
        return
    cache.put(k, buf.getvalue())
