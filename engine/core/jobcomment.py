"""What a job's owner asks of Recover, read from the Slurm job comment (``sbatch --comment``).

The comment is the user's text: it is bounded, parsed strictly, and a comment that is not
exactly right is ignored as a whole (with the reason), never half-read. Syntax::

    recover:off                 the job opts out: Recover never requeues, excludes, holds or
                                cancels it; its owner is paged with what Recover would have done
    recover:max_restarts=N      at most N restarts of this job in the retry window (0-999); it
                                lowers the site's policy.retry.max_per_job, never raises it

Directives are whitespace-separated tokens that start with ``recover:``; the rest of the comment
is someone else's (a project tag, a workflow id) and is not read. Both directives may be given
(``recover:off`` wins). A comment is ignored as a whole when it is longer than ``MAX_COMMENT``
characters, holds a control character, names an unknown key, repeats a key, gives a value that is
not 0-999 in ASCII digits, or holds ``recover:`` anywhere but at the start of a token
(``x;recover:off``). What the site decides stays the site's: a node with fatal hardware is drained
whatever a job's comment says (``engine.core.scope``).

    parse_comment("project=llm recover:max_restarts=2")  # Directives(max_restarts=2)
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["Directives", "MAX_COMMENT", "MAX_RESTARTS", "parse_comment"]

#: the longest comment read; a longer one that holds a directive is ignored as a whole
MAX_COMMENT = 1024
#: the largest max_restarts written (a site's own limit is usually far lower: the lower applies)
MAX_RESTARTS = 999
_PREFIX = "recover:"
_TOKEN = re.compile(r"recover:(?:(off)|max_restarts=([0-9]{1,3}))", re.ASCII)
# any control character (C0, DEL, C1) other than the space and tab that separate tokens
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# tokens are separated by spaces and tabs only (another white space joins its neighbours)
_SPACES = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class Directives:
    """A comment's directives; ``problem``: why the comment was ignored (then none apply)."""

    off: bool = False
    max_restarts: int | None = None
    problem: str | None = None

    @property
    def any(self) -> bool:
        return self.off or self.max_restarts is not None

    def describe(self) -> str:
        """The directives as a job's owner wrote them."""
        words = ["recover:off"] if self.off else []
        if self.max_restarts is not None:
            words.append(f"recover:max_restarts={self.max_restarts}")
        return " ".join(words)


NONE = Directives()


def _bad(why: str) -> Directives:
    return Directives(problem=why)


@functools.lru_cache(maxsize=4096)
def parse_comment(comment: str | None) -> Directives:
    """The directives of one job comment (see the module); never raises."""
    if not comment or not isinstance(comment, str):
        return NONE
    if _PREFIX not in comment.casefold():  # (a comment of other tools only: not Recover's business)
        return NONE
    if len(comment) > MAX_COMMENT:
        return _bad(f"longer than {MAX_COMMENT} characters ({len(comment)})")
    if _CONTROL.search(comment):
        return _bad("it holds a control character")
    off = False
    restarts: int | None = None
    for token in _SPACES.split(comment):
        if _PREFIX not in token.casefold():
            continue  # someone else's text
        shown = token[:40].encode("ascii", "backslashreplace").decode()
        if not token.startswith(_PREFIX):
            return _bad(f"{shown!r}: recover: must start a word, in lower case")
        m = _TOKEN.fullmatch(token)
        if m is None:
            return _bad(f"{shown!r} is not recover:off or recover:max_restarts=N (N 0-{MAX_RESTARTS})")
        if m.group(1):
            if off:
                return _bad("recover:off given twice")
            off = True
        else:
            if restarts is not None:
                return _bad("recover:max_restarts given twice")
            restarts = int(m.group(2))
    return Directives(off=off, max_restarts=restarts)
