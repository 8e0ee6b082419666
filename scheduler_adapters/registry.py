"""Scheduler adapters by name.

Usage::

    adapter = get_adapter("slurm", timeout=10)
    register("mine", "my_site.adapters:MyAdapter")

A factory is an import path ``"module:attribute"`` (imported on first use, so a missing or
broken adapter module only matters to whoever asks for it) or any callable that returns an
adapter. ``"none"`` (monitor without a scheduler) is not an adapter: callers handle it before
they get here.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from .base import SchedulerAdapter, SchedulerError

__all__ = ["UnknownAdapter", "adapter_names", "get_adapter", "get_factory", "register"]

logger = logging.getLogger(__name__)

Factory = str | Callable[..., SchedulerAdapter]

_FACTORIES: dict[str, Factory] = {
    "slurm": "scheduler_adapters.slurm:SlurmAdapter",
    "simulated": "scheduler_adapters.simulated:SimulatedCluster",
}


class UnknownAdapter(SchedulerError, LookupError):
    """No adapter by that name, or its module cannot be imported."""


def register(name: str, factory: Factory) -> None:
    """Add or replace the adapter called ``name``."""
    if not name or name == "none":
        raise ValueError(f"{name!r} cannot name an adapter")
    _FACTORIES[name] = factory


def adapter_names() -> list[str]:
    return sorted(_FACTORIES)


def get_adapter(name: str, **kwargs: Any) -> SchedulerAdapter:
    """A new adapter; keyword arguments go to its constructor."""
    return get_factory(name)(**kwargs)


def get_factory(name: str) -> Callable[..., SchedulerAdapter]:
    """What ``get_adapter`` would call, its module imported."""
    if name == "none":
        raise UnknownAdapter("'none' means no scheduler; it has no adapter (handle it before asking)")
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownAdapter(f"unknown scheduler adapter {name!r}; known: {', '.join(adapter_names())}") from None
    return _load(name, factory) if isinstance(factory, str) else factory


def _load(name: str, target: str) -> Callable[..., SchedulerAdapter]:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or "?"
        if module_name == missing or module_name.startswith(missing + "."):
            why = f"module {module_name} is missing"
        else:
            why = f"{module_name} needs {missing}, which is not installed"
        raise UnknownAdapter(f"scheduler adapter {name!r} is not available: {why}") from exc
    try:
        factory: Callable[..., SchedulerAdapter] = getattr(module, attribute)
    except AttributeError:
        raise UnknownAdapter(f"scheduler adapter {name!r} is not available: {module_name} has no {attribute}") from None
    return factory
