"""Capture resolution: which positions the engine will capture, which the manifest needs, and the
drafter ids (overlay) that reconcile them. Pure: data in, data out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specctl.engines import ConfigOverride
from specctl.engines.capture_frame import positions_of
from specctl.plan.inputs import Inputs

IdsOrigin = Literal["profile", "drafter-config", "overlay", "engine-default", "override"]


@dataclass(frozen=True)
class CaptureResolution:
    """The capture contract as resolved for one profile on one engine version."""

    needed: tuple[int, ...] | None  # ascending unique positions the manifest needs
    config_ids: tuple[int, ...] | None  # ids the drafter's config.json gives the engine (None: its default)
    config_outcome: Any  # CaptureOutcome of config_ids
    served_ids: tuple[int, ...] | None  # ids the engine will read once the plan is applied
    served_outcome: Any  # CaptureOutcome of served_ids
    origin: IdsOrigin
    overlay: bool  # whether render rewrites the drafter config
    inexpressible: bool  # no ids make this engine version capture what the manifest needs
    num_layers: int | None = None  # the target's layer count as the engine loads it (a config override may change it)
    override: ConfigOverride | None = None  # a launch flag that replaces config keys (origin "override": the ids)

    @property
    def matches(self) -> bool:
        return (
            self.needed is not None
            and self.served_outcome is not None
            and not self.served_outcome.error
            and not self.served_outcome.dropped
            and tuple(self.served_outcome.captured) == self.needed
        )


def resolve_capture(inputs: Inputs) -> CaptureResolution | None:
    """None when there is nothing to resolve: no drafter, no convention, or no layer count."""
    profile, convention, n = inputs.profile, inputs.convention, inputs.num_layers
    if profile.drafter is None or convention is None or n is None or not convention.supported:
        return None
    # a launch flag may replace keys of both configs as the engine loads them: the layer count, the ids
    override = inputs.engine.config_override(profile.engine.version, profile.engine.args)
    if override is not None and override.error:
        override = None  # the engine does not start with it; the check reports that
    layers = override.num_layers if override is not None and override.num_layers else n
    needed = tuple(sorted(set(positions_of(inputs.manifest.capture.layers)))) if inputs.manifest else None
    config_ids = inputs.engine.drafter_ids(inputs.drafter.config) if inputs.drafter else None
    config_outcome = convention.capture(config_ids, layers)

    def result(
        ids: tuple[int, ...] | None, origin: IdsOrigin, overlay: bool, inexpressible: bool = False
    ) -> CaptureResolution:
        outcome = convention.capture(list(ids) if ids is not None else None, layers)
        return CaptureResolution(
            needed, _tuple(config_ids), config_outcome, ids, outcome, origin, overlay, inexpressible, layers, override
        )

    if override is not None and override.decides_ids:  # no overlay can change what the flag replaces
        config = inputs.drafter.config if inputs.drafter else {}
        return result(_tuple(inputs.engine.drafter_ids(override.applied(config))), "override", False)
    if profile.drafter.layer_ids is not None:
        ids = tuple(profile.drafter.layer_ids)
        return result(ids, "profile", ids != _tuple(config_ids))
    unchanged_origin: IdsOrigin = "drafter-config" if config_ids is not None else "engine-default"
    if needed is None or (
        not config_outcome.error and not config_outcome.dropped and tuple(config_outcome.captured) == needed
    ):
        return result(_tuple(config_ids), unchanged_origin, False)
    overlay_ids = convention.ids_for(list(needed), layers)
    if overlay_ids is None:
        return result(_tuple(config_ids), unchanged_origin, False, inexpressible=True)
    return result(tuple(overlay_ids), "overlay", True)


def _tuple(ids: list[int] | tuple[int, ...] | None) -> tuple[int, ...] | None:
    return tuple(ids) if ids is not None else None
