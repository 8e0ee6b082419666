"""Running Slurm's commands: no shell, a time limit, a bound on what is read, bytes decoded safely.

What squeue and scontrol print holds fields users set (job names, comments, paths), and those
need not be UTF-8: ``sbatch -J $'bad\\xff'`` is accepted. A strict decode would make every poll
of the whole cluster fail while such a job is listed, so stdout is decoded with
``surrogateescape`` (lossless: a path still names the file it named) and stderr, which is only
ever shown, with ``replace``. ``readable()`` turns a decoded text into one that can be logged or
stored anywhere (each undecodable byte becomes U+FFFD).

What a command prints is read up to a bound (``max_output`` bytes of stdout): past it the
command is killed and the result says so (``truncated``), instead of a poll holding as much
memory as a command cares to print.
"""

from __future__ import annotations

import os
import selectors
import subprocess
from collections.abc import Sequence

from engine.clock import SYSTEM

from ..base import CommandResult

#: a child process runs in real time, and select() waits in real time: its deadline and duration
#: are the machine's clock, whatever clock the rest of Recover is handed (a fake one cannot
#: stop a command that hangs)
_REAL = SYSTEM

__all__ = ["DEFAULT_MAX_OUTPUT", "readable", "subprocess_runner", "unreadable"]

#: 256 MiB of stdout: squeue --json prints ~3.5 KiB a job, so this is some 70,000 jobs listed
#: at once (SlurmAdapter(max_output=...) where a cluster lists more)
DEFAULT_MAX_OUTPUT = 256 * 1024 * 1024
# stderr is for messages: what is kept of it (the rest is read and dropped, so no pipe fills)
_MAX_STDERR = 64 * 1024
_CHUNK = 1 << 16


def unreadable(text: str) -> bool:
    """Whether ``text`` holds bytes that were not UTF-8 (decoded as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def readable(text: str) -> str:
    """``text`` with each byte that was not UTF-8 as U+FFFD: safe to log, store and print."""
    if not unreadable(text):
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def subprocess_runner(argv: Sequence[str], timeout: float, max_output: int = DEFAULT_MAX_OUTPUT) -> CommandResult:
    """Run argv without a shell. rc 124 (timed_out) on timeout, 127 when the program is missing,
    ``truncated`` (the command killed) when it printed more than ``max_output`` bytes."""
    started = _REAL.monotonic()
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        return CommandResult(rc=127, stderr=str(exc), duration_s=_REAL.monotonic() - started)
    except PermissionError as exc:
        return CommandResult(rc=126, stderr=str(exc), duration_s=_REAL.monotonic() - started)
    with proc:
        out, err, why = _read(proc, started + timeout, max_output)
        if not why:  # both pipes closed: the command has ended, or is about to
            try:
                proc.wait(max(0.0, started + timeout - _REAL.monotonic()))
            except subprocess.TimeoutExpired:
                why = "timeout"
        if why:
            proc.kill()
        rc = proc.wait()
    stdout = out.decode("utf-8", "surrogateescape")
    stderr = err.decode("utf-8", "replace")
    duration = _REAL.monotonic() - started
    if why == "timeout":
        return CommandResult(124, stdout, stderr or f"timed out after {timeout:g} s", True, duration)
    if why == "too much":
        message = f"{argv[0]} printed more than {max_output} bytes (the adapter's max_output): killed, not read"
        return CommandResult(rc if rc else 1, "", message, False, duration, truncated=True)
    return CommandResult(rc, stdout, stderr, False, duration)


def _read(proc: subprocess.Popen, deadline: float, max_output: int) -> tuple[bytes, bytes, str]:
    """Both pipes until they close, the deadline passes ("timeout") or stdout passes
    ``max_output`` ("too much")."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - _REAL.monotonic()
            if left <= 0:
                return bytes(out), bytes(err), "timeout"
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf: bytearray = key.data
                if buf is err:
                    buf.extend(chunk[: max(0, _MAX_STDERR - len(buf))])
                    continue
                buf.extend(chunk)
                if len(buf) > max_output:
                    return b"", bytes(err), "too much"
    return bytes(out), bytes(err), ""
