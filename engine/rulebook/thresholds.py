"""The node agent's GPU counter thresholds as rulebook data (``policy.thresholds``).

The values live in the rulebook (``rules/15-gpu-thresholds.yaml`` and a site's files); this
module only knows their names and shapes, checks them where they are written (file:line:col),
and resolves the values for one GPU model::

    values = thresholds_for(compiled.policy.thresholds, "NVIDIA H100 80GB HBM3")
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

__all__ = ["THRESHOLD_KEYS", "check_thresholds", "thresholds_for"]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def _number_or_null(v: Any) -> bool:
    return v is None or _number(v)


def _names(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)


def _per_lane(v: Any) -> bool:
    return isinstance(v, Mapping) and all(_number(x) and str(k).isdigit() for k, x in v.items())


def _count(v: Any) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)


#: name -> (check, what a valid value is)
THRESHOLD_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    **dict.fromkeys(
        (
            "ecc_uncorrected_volatile_max",
            "ecc_uncorrected_aggregate_max",
            "ecc_corrected_volatile_max",
            "ecc_corrected_aggregate_max",
            "row_remap_failure_max",
            "row_remap_pending_max",
            "row_remap_uncorrectable_max",
            "retired_pages_pending_max",
            "retired_pages_max",
            "nvlink_replay_per_min",
            "nvlink_recovery_per_min",
            "nvlink_crc_per_s",
            "pcie_replay_per_min",
            "temperature_c",
        ),
        (_number_or_null, "a number >= 0 or null"),
    ),
    "window_s": (_number, "a number of seconds > 0"),
    "pcie_replay_default_per_min": (_number, "a number >= 0"),
    "temperature_hysteresis_c": (_number, "a number >= 0"),
    "pcie_replay_per_lane_per_min": (_per_lane, "a mapping of PCIe generation -> replays per lane per minute"),
    "throttle_alert_reasons": (_names, "a list of throttle reason names"),
    "expected_gpus": (_count, "a whole number or null"),
}


def check_thresholds(value: Any, report: Callable[[Any, str, str, str], None]) -> None:
    """Report each problem of a ``policy.thresholds`` mapping as ``report(key_or_None, code,
    message, hint)``, with the key of the offending entry (``("models", NAME, KEY)`` inside
    ``models``)."""

    def one(where: Any, key: str, v: Any, prefix: str) -> None:
        spec = THRESHOLD_KEYS.get(key)
        if spec is None:
            report(
                where,
                "E-UNKNOWN-KEY",
                f"unknown threshold {prefix}{key!r}",
                f"known: {', '.join(sorted(THRESHOLD_KEYS))}",
            )
        elif not spec[0](v):
            report(where, "E-VALUE", f"threshold {prefix}{key} must be {spec[1]}, got {v!r}", "")

    for key, v in value.items():
        if key == "models":
            if not isinstance(v, Mapping):
                report(key, "E-TYPE", "policy.thresholds.models must map a GPU name to thresholds", "")
                continue
            for model, values in v.items():
                if not isinstance(values, Mapping):
                    report(("models", model), "E-TYPE", f"policy.thresholds.models.{model} must be a mapping", "")
                    continue
                for k, x in values.items():
                    if k == "models":
                        report(("models", model, k), "E-VALUE", "models do not nest", "")
                    else:
                        one(("models", model, k), str(k), x, f"models.{model}.")
        else:
            one(key, str(key), v, "")


def thresholds_for(values: Mapping[str, Any] | None, model: str | None = None) -> dict[str, Any]:
    """The thresholds for one GPU: the general values, then those of the longest ``models`` key
    found (without case) in the GPU's name."""
    base = {k: v for k, v in dict(values or {}).items() if k != "models"}
    models = (values or {}).get("models") or {}
    if model and isinstance(models, Mapping):
        name = model.lower()
        hits = sorted((k for k in models if str(k).lower() in name), key=lambda k: len(str(k)), reverse=True)
        if hits:
            base.update(dict(models[hits[0]]))
    return base
