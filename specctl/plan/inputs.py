"""Inputs: everything a check or a plan is computed from, gathered by a flow before the pure core runs."""

from __future__ import annotations

from dataclasses import dataclass

from specctl.engines import Convention, Engine, ProbeReport
from specctl.errors import CheckpointError, EngineError
from specctl.facts.checkpoint import CheckpointMeta
from specctl.profile import DrafterManifest, Profile


@dataclass(frozen=True)
class Inputs:
    """A profile with its manifest, checkpoint metadata, engine and capture convention.

    A piece that could not be had is None, with the error beside it, so the checks can report it
    as a finding next to everything else instead of stopping at the first problem.
    """

    profile: Profile
    profile_path: str
    profile_sha256: str
    engine: Engine
    manifest: DrafterManifest | None = None
    manifest_path: str | None = None
    target: CheckpointMeta | None = None
    target_error: CheckpointError | None = None
    drafter: CheckpointMeta | None = None
    drafter_error: CheckpointError | None = None
    convention: Convention | None = None
    convention_error: EngineError | None = None
    probe: ProbeReport | None = None  # the installed engine's own answers, when it was probed
    workload_dir: str | None = (
        None  # where a relative verify.workload is read from: the folder of the file that wrote it
    )

    @property
    def architecture(self) -> str | None:
        """The target architecture, from its config, else from the manifest."""
        if self.target is not None and self.target.architecture:
            return self.target.architecture
        return self.manifest.target.architecture if self.manifest else None

    @property
    def num_layers(self) -> int | None:
        if self.target is not None and self.target.num_hidden_layers:
            return self.target.num_hidden_layers
        return self.manifest.target.num_hidden_layers if self.manifest else None

    @property
    def hidden_size(self) -> int | None:
        if self.target is not None and self.target.hidden_size:
            return self.target.hidden_size
        return self.manifest.target.hidden_size if self.manifest else None
