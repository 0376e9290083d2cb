"""The DrafterManifest: the drafter's training contract.

`capture.layers` is in the CANONICAL frame: 0-based decoder layers whose output was captured, or
`embedding`, in concatenation order. Engine frames are translated to and from it in `engines/capture_frame`.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from specctl.profile._invalid import invalid
from specctl.profile.profile import StrictModel, check_revision

CanonicalLayer = int | Literal["embedding"]


class ManifestDrafter(StrictModel):
    model: str
    revision: str | None = None
    allow_unpinned: bool = False

    @model_validator(mode="after")
    def _pinned(self) -> ManifestDrafter:
        check_revision(self.model, self.revision, self.allow_unpinned)
        return self


class ManifestTarget(ManifestDrafter):
    architecture: Annotated[str, Field(description="architectures[0] of the target config, e.g. DeepseekV3ForCausalLM")]
    num_hidden_layers: Annotated[int, Field(ge=1)]
    hidden_size: Annotated[int, Field(ge=1)]
    vocab_size: Annotated[int, Field(ge=1)]


class Capture(StrictModel):
    layers: Annotated[
        list[CanonicalLayer],
        Field(
            min_length=1,
            description="decoder layers whose OUTPUT was captured (0-based) or `embedding`, in concat order",
        ),
    ]
    width: Annotated[int, Field(ge=1, description="len(layers) x target hidden size = drafter fc input features")]


class Training(StrictModel):
    framework: str | None = None
    framework_version: str | None = None
    tp: Annotated[int | None, Field(ge=1)] = None
    dataset: str | None = None
    samples: Annotated[int | None, Field(ge=0)] = None
    date: datetime.date | None = None
    source_convention: Annotated[
        str | None, Field(description="how the ids in the drafter config were meant, as imported")
    ] = None
    notes: str | None = None


class ManifestMetadata(StrictModel):
    name: str
    description: str = ""


class DrafterManifest(StrictModel):
    """Which target layers a drafter was trained on, and the target it was trained against."""

    api_version: Literal["specctl/v1"] = Field("specctl/v1", alias="apiVersion")
    kind: Literal["DrafterManifest"] = "DrafterManifest"
    metadata: ManifestMetadata
    drafter: ManifestDrafter
    target: ManifestTarget
    capture: Capture
    training: Training = Training()

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True, defer_build=True)

    @model_validator(mode="after")
    def _width_matches(self) -> DrafterManifest:
        expected = len(self.capture.layers) * self.target.hidden_size
        if self.capture.width != expected:
            raise invalid(
                "capture_width",
                "capture.width is {width} but {n} layers x hidden {hidden} = {expected}",
                {
                    "width": self.capture.width,
                    "n": len(self.capture.layers),
                    "hidden": self.target.hidden_size,
                    "expected": expected,
                    "at": "capture.width",
                    "fix": f"set `width: {expected}` or correct capture.layers / target.hidden_size",
                },
            )
        return self
