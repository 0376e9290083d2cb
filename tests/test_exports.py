"""The public API is exactly what __all__ says, and every name in it resolves."""

import specctl


def test_all_is_pinned() -> None:
    assert specctl.__all__ == [
        "CheckpointMeta",
        "DrafterManifest",
        "Finding",
        "Plan",
        "Profile",
        "SpecctlError",
        "__version__",
        "load_manifest",
        "load_profile",
        "read_checkpoint",
    ]


def test_every_public_name_resolves() -> None:
    for name in specctl.__all__:
        assert getattr(specctl, name) is not None
