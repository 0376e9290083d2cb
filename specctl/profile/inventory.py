"""The Inventory (`hosts.yaml`): hosts by name and groups of them."""

from __future__ import annotations

import posixpath
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from specctl.profile.profile import Name, StrictModel


class SshTarget(StrictModel):
    hostname: str
    user: str | None = None
    port: Annotated[int | None, Field(ge=1, le=65535)] = None
    identity_file: str | None = None
    proxy_jump: str | None = None


class Host(StrictModel):
    ssh: Annotated[str | SshTarget | None, Field(description="an alias from ~/.ssh/config, or connection details")] = None
    root: Annotated[str, Field(description="remote state directory")] = "~/.specctl"
    address: Annotated[str | None, Field(description="where its servers are reached over HTTP (default: the SSH hostname)")] = None
    python: str | None = None
    hf_home: Annotated[str | None, Field(description="this host's Hugging Face home (HF_HOME) for staging and the launch, "
                                                     "in place of the profile's HF_HOME / HF_HUB_CACHE")] = None
    gpu: str | None = None
    gpus: Annotated[int | None, Field(ge=1)] = None

    @field_validator("root")
    @classmethod
    def _root_is_a_state_directory(cls, root: str) -> str:
        """Releases are created and removed under root, so it must be a real directory of its own:
        an empty or relative root would land in whatever directory a command runs in, and "/" is
        the whole filesystem."""
        if not (root == "~" or root.startswith("~/") or root.startswith("/")):
            raise PydanticCustomError("root_relative", "root {root!r} is not an absolute path or one under ~/",
                                      {"root": root, "fix": "write an absolute path, or one under the host's home, e.g. `root: ~/.specctl`"})
        if posixpath.normpath(root) in ("/", "//"):
            raise PydanticCustomError("root_filesystem", "root {root!r} is the filesystem root",
                                      {"root": root, "fix": "use a directory of its own, e.g. `root: /srv/specctl`"})
        return root


class Inventory(StrictModel):
    api_version: Literal["specctl/v1"] = Field("specctl/v1", alias="apiVersion")
    kind: Literal["Inventory"] = "Inventory"
    hosts: dict[Name, Host]
    groups: dict[str, list[str]] = {}

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True, defer_build=True)

    @model_validator(mode="after")
    def _groups_name_hosts(self) -> Inventory:
        for group, members in self.groups.items():
            unknown = [m for m in members if m not in self.hosts]
            if unknown:
                raise PydanticCustomError("unknown_host", "group {group!r} names unknown hosts {unknown}",
                                          {"group": group, "unknown": unknown, "at": f"groups.{group}", "fix": "define them under hosts, or fix the names"})
        return self
