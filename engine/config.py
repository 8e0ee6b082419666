"""Settings: ``recover.toml``, then environment variables, then command-line flags (which win).

    # recover.toml (found via --config, $RECOVER_CONFIG, or ./recover.toml)
    db = "/var/lib/recover/recover.db"
    rules = ["/etc/recover/site"]
    spool = "/shared/recover/spool"
    scheduler = "slurm"
    follow = ["/shared/logs/*.out"]
    no_defaults = false
    fr_dump_max_bytes = 67108864   # a flight-recorder dump larger than this is refused unread
    fr_dump_dir = "/scratch/fr/{job}/"   # live: where a job's dumps are, if it prints no prefix
    fr_dump_dirs = ["/scratch/fr"]       # live: the folders a printed prefix may point into
    fr_dump_wait = 120                   # live: seconds to wait for the dumps after a timeout
    gpus_per_node = 8                    # recover goodput: GPUs on each node (docs/goodput.md)
    [autonomy]                 # per decision kind: observe | recommend | act
    isolate_and_restart = "recommend"
    restart = "act"
    [scope]                    # per Slurm partition: act | recommend | ignore (policy.scope)
    default = "recommend"
    partitions = { canary = "act", interactive = "ignore" }

Environment: RECOVER_DB, RECOVER_RULES and RECOVER_FOLLOW (lists separated by ':'),
RECOVER_SPOOL, RECOVER_SCHEDULER, RECOVER_FR_DUMP_MAX_BYTES.
"""

from __future__ import annotations
from engine.errors import ConfigError
from engine.facts import DECISIONS

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["Settings", "ConfigError", "load_settings", "autonomy_overlay"]

#: [scope] keys, and a partition's modes (as rules/50-policy.yaml's policy.scope)
SCOPE_MODES = ("act", "recommend", "ignore")
_PARTITION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")

KEYS: dict[str, type | tuple[type, ...]] = {
    "db": str,
    "rules": list,
    "spool": str,
    "scheduler": str,
    "follow": list,
    "no_defaults": bool,
    "autonomy": dict,
    "scope": dict,
    "fr_dump_max_bytes": int,
    "fr_dump_dir": str,
    "fr_dump_dirs": list,
    "fr_dump_wait": (int, float),
    "gpus_per_node": int,
}
AUTONOMY = ("observe", "recommend", "act")


@dataclass
class Settings:
    path: str | None = None
    db: str | None = None
    rules: list[str] = field(default_factory=list)
    spool: str | None = None
    scheduler: str | None = None
    follow: list[str] = field(default_factory=list)
    no_defaults: bool = False
    autonomy: dict[str, str] = field(default_factory=dict)
    #: policy.scope as the config sets it: default, partitions, job_comment (validated here)
    scope: dict[str, Any] = field(default_factory=dict)
    #: the size bound on one flight-recorder dump (engine.sources.flight_recorder.Limits)
    fr_dump_max_bytes: int = 64 << 20
    #: live: the site's folder of a job's dumps ("{job}" in it), the folders a prefix a job prints
    #: may point into, and the seconds to wait for the dumps (engine.live.frdumps)
    fr_dump_dir: str | None = None
    fr_dump_dirs: list[str] = field(default_factory=list)
    fr_dump_wait: float = 120.0
    #: recover goodput: GPUs on each node, for GPU-hours (None: the report's default, said so)
    gpus_per_node: int | None = None


def load_settings(path: str | None = None, env: Mapping[str, str] | None = None) -> Settings:
    if env is None:
        env = os.environ
    path = path or env.get("RECOVER_CONFIG") or ("recover.toml" if Path("recover.toml").is_file() else None)
    s = Settings(path=path)
    if path:
        try:
            data: dict[str, Any] = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"{path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        for key, value in data.items():
            if key not in KEYS:
                raise ConfigError(f"{path}: unknown key {key!r} (known: {', '.join(KEYS)})")
            # Any: the checks below test each key's value further, so this one must not narrow it
            kind: Any = KEYS[key]
            if not isinstance(value, kind):
                raise ConfigError(f"{path}: {key} must be a {kind.__name__ if isinstance(kind, type) else 'number'}")
            if key == "fr_dump_max_bytes" and (isinstance(value, bool) or value <= 0):
                raise ConfigError(f"{path}: fr_dump_max_bytes must be a positive number of bytes")
            if key == "fr_dump_wait" and (isinstance(value, bool) or not 0 < value <= 3600):
                raise ConfigError(f"{path}: fr_dump_wait must be seconds in (0, 3600]")
            if key == "gpus_per_node" and (isinstance(value, bool) or value <= 0):
                raise ConfigError(f"{path}: gpus_per_node must be a number of GPUs above 0")
            if key in ("fr_dump_dir", "fr_dump_dirs") and not all(
                isinstance(v, str) and os.path.isabs(v) for v in ([value] if isinstance(value, str) else value)
            ):
                raise ConfigError(f"{path}: {key} must be absolute paths")
            if key in ("rules", "follow") and not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{path}: {key} must be a list of strings")
            setattr(s, key, value)
        base = Path(path).resolve().parent  # relative paths in the file are relative to it
        s.rules = [str(base / r) if not os.path.isabs(r) else r for r in s.rules]
        if s.db and not os.path.isabs(s.db) and not s.db.startswith(("postgresql://", "postgres://")):
            s.db = str(base / s.db)
        for dec, mode in s.autonomy.items():
            if dec not in DECISIONS or mode not in AUTONOMY:
                raise ConfigError(
                    f"{path}: autonomy.{dec} = {mode!r}: decisions are {', '.join(DECISIONS)}, "
                    f"modes {', '.join(AUTONOMY)}"
                )
        _check_scope(path, s.scope)
    if env.get("RECOVER_DB"):
        s.db = env["RECOVER_DB"]
    if env.get("RECOVER_RULES"):
        s.rules = [p for p in env["RECOVER_RULES"].split(":") if p]
    if env.get("RECOVER_FOLLOW"):
        s.follow = [p for p in env["RECOVER_FOLLOW"].split(":") if p]
    if env.get("RECOVER_SPOOL"):
        s.spool = env["RECOVER_SPOOL"]
    if env.get("RECOVER_SCHEDULER"):
        s.scheduler = env["RECOVER_SCHEDULER"]
    if env.get("RECOVER_FR_DUMP_MAX_BYTES"):
        value = env["RECOVER_FR_DUMP_MAX_BYTES"]
        if not value.isdigit() or int(value) <= 0:
            raise ConfigError(f"RECOVER_FR_DUMP_MAX_BYTES={value[:40]!r}: a positive number of bytes")
        s.fr_dump_max_bytes = int(value)
    return s


def _check_scope(path: str, scope: dict[str, Any]) -> None:
    for key, value in scope.items():
        if key == "default" and value not in SCOPE_MODES:
            raise ConfigError(f"{path}: scope.default = {value!r}: one of {', '.join(SCOPE_MODES)}")
        elif key == "job_comment" and not isinstance(value, bool):
            raise ConfigError(f"{path}: scope.job_comment must be true or false")
        elif key == "partitions":
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: scope.partitions must be a table of partition = mode")
            for name, mode in value.items():
                if not _PARTITION.fullmatch(name) or mode not in SCOPE_MODES:
                    raise ConfigError(
                        f"{path}: scope.partitions.{name[:64]} = {mode!r}: a partition name, "
                        f"and one of {', '.join(SCOPE_MODES)}"
                    )
        elif key not in ("default", "job_comment", "partitions"):
            raise ConfigError(f"{path}: unknown key scope.{key} (known: default, partitions, job_comment)")


def autonomy_overlay(settings: Settings) -> list[tuple[str, str]]:
    """The config's autonomy and scope as rulebook layers (validated like any site file)."""
    out = []
    where = settings.path or "recover.toml"
    if settings.autonomy:
        body = "".join(f"    {dec}: {mode}\n" for dec, mode in settings.autonomy.items())
        out.append((f"{where}[autonomy]", f"policy:\n  autonomy:\n{body}"))
    if settings.scope:
        # JSON is YAML: the names and modes were checked above, and quoting keeps them as written
        out.append((f"{where}[scope]", "policy:\n  scope: " + json.dumps(settings.scope) + "\n"))
    return out
