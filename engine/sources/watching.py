"""Which watcher tells the follower that a followed folder changed.

- ``--poll`` (NFS, Lustre: other hosts' writes raise no events here): watchdog's polling observer;
- Linux, no recursive glob: the follower's own single-thread inotify reader
  (``engine.sources.inotify``), one read and one lock per batch of events;
- anywhere else (another system, a recursive glob, inotify not available): watchdog's native
  observer, the portable fallback.

Either way the watcher only marks paths; the follower's reading thread reads them.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable

from engine.sources import inotify
from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

if TYPE_CHECKING:
    from engine.sources.follow import Follower

logger = logging.getLogger(__name__)

__all__ = ["EVENTS", "Handler", "make_observer", "schedule"]

#: the events a followed file's folder is watched for: what changes a file's bytes or which file a
#: name is. Not opens and closes without a write (IN_OPEN, IN_CLOSE_NOWRITE): anything that reads
#: a followed log (the controller itself: a file's first bytes are fingerprinted at commit; a
#: user's tail) raised two events per open, and each marked the file to be read again for nothing
EVENTS = [FileModifiedEvent, FileCreatedEvent, FileDeletedEvent, FileMovedEvent, FileClosedEvent]


def schedule(observer: Any, handler: FileSystemEventHandler, directory: str, recursive: bool) -> ObservedWatch:
    try:
        return observer.schedule(handler, directory, recursive=recursive, event_filter=EVENTS)
    except TypeError:  # watchdog < 4 has no event filter: every event, as before
        return observer.schedule(handler, directory, recursive=recursive)


class Handler(FileSystemEventHandler):
    def __init__(self, follower: "Follower"):
        self.follower = follower

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            return
        for p in (getattr(event, "src_path", None), getattr(event, "dest_path", None)):
            if p:
                self.follower._mark(os.fsdecode(p))


def make_observer(
    poll: float | None,
    recursive: bool,
    on_paths: Callable[[list[str]], None],
    on_lost: Callable[[], None],
    own: bool = True,
) -> BaseObserver | inotify.Inotify:
    """The watcher for a follower (see the module's docstring); ``own=False``: never our reader."""
    if poll:
        return PollingObserver(timeout=poll)
    if own and not recursive and inotify.available():
        try:
            return inotify.Inotify(on_paths, on_lost)
        except OSError as exc:
            logger.warning("inotify reader: %s; using watchdog's observer instead", exc)
    return Observer()
