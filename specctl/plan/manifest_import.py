"""Building a DrafterManifest from a drafter checkpoint: ids plus their convention -> canonical layers.

Pure: the flow reads the checkpoints and any training state; this module refuses to guess when
the meaning of the ids is ambiguous (the failure this project exists to prevent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specctl.engines import Engine
from specctl.engines.capture_frame import EMBEDDING, Layer, layer_of, show_layers
from specctl.errors import ManifestImportError
from specctl.facts.checkpoint import CheckpointMeta

CONVENTIONS = ("specforge", "sglang", "vllm", "canonical")


def layers_from_ids(
    ids: Sequence[int],
    convention: str,
    *,
    num_layers: int,
    engine: Engine | None = None,
    engine_version: str | None = None,
    architecture: str | None = None,
) -> list[Layer]:
    """Canonical layers meant by `ids` under a named convention (see reference eagle3-conventions.md)."""
    if convention in ("specforge", "canonical"):  # id i = output of decoder layer i
        if any(i < 0 for i in ids):
            raise ManifestImportError(
                f"{convention} ids must be >= 0, got {list(ids)}", fix="check the ids or the convention"
            )
        return list(ids)
    if convention == "vllm":  # boundary index: i = input of layer i = output of layer i-1; 0 = embeddings
        if any(i < 0 for i in ids):
            raise ManifestImportError(
                f"vllm boundary ids must be >= 0, got {list(ids)}", fix="check the ids or the convention"
            )
        return [EMBEDDING if i == 0 else i - 1 for i in ids]
    if convention == "sglang":
        if engine is None or engine_version is None or architecture is None:
            raise ManifestImportError(
                "the sglang convention depends on the engine version and target architecture",
                fix="pass --engine-version and --target",
            )
        outcome = engine.convention(engine_version, architecture).capture(list(ids), num_layers)
        if outcome.dropped or outcome.error:
            raise ManifestImportError(
                f"under {engine.name} {engine_version} the ids {list(ids)} do not all capture "
                f"({outcome.error or outcome.dropped})",
                fix="check the ids, engine version and target",
            )
        return [layer_of(p) for p in outcome.captured]
    raise ManifestImportError(f"unknown convention {convention!r}", fix=f"use one of: {', '.join(CONVENTIONS)}")


def recorded_layers(
    config: Mapping[str, Any], training: Mapping[str, Any] | None
) -> tuple[list[int] | None, str | None, str]:
    """Ids and their convention when the checkpoint or its training state records them unambiguously.

    Returns (ids, convention or None when not recorded, where they came from).
    """
    provenance = config.get("specforge_model_provenance")
    if isinstance(provenance, Mapping) and isinstance(provenance.get("capture_layers"), list):
        return list(provenance["capture_layers"]), "specforge", "config.json specforge_model_provenance.capture_layers"
    if training:
        for key in ("aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids", "capture_layers"):
            value = _find(training, key)
            if isinstance(value, list):
                return list(value), "specforge", f"training state {key}"
    nested = config.get("eagle_config")
    if isinstance(nested, Mapping) and isinstance(nested.get("eagle_aux_hidden_state_layer_ids"), list):
        return (
            list(nested["eagle_aux_hidden_state_layer_ids"]),
            None,
            "config.json eagle_config.eagle_aux_hidden_state_layer_ids",
        )
    if isinstance(config.get("eagle_aux_hidden_state_layer_ids"), list):
        return (
            list(config["eagle_aux_hidden_state_layer_ids"]),
            None,
            "config.json eagle_aux_hidden_state_layer_ids (top level)",
        )
    return None, None, "none recorded"


def _find(data: Mapping[str, Any], key: str) -> Any:
    """A key anywhere in a nested run config (SpecForge nests it under `model`)."""
    if key in data:
        return data[key]
    for value in data.values():
        if isinstance(value, Mapping):
            found = _find(value, key)
            if found is not None:
                return found
    return None


def build_manifest(
    drafter: CheckpointMeta,
    target: CheckpointMeta,
    *,
    drafter_model: str,
    drafter_revision: str | None,
    target_model: str,
    target_revision: str | None,
    convention: str | None,
    training: Mapping[str, Any] | None,
    name: str,
    engine: Engine | None = None,
    engine_version: str | None = None,
) -> dict[str, Any]:
    """The manifest as data; raises ManifestImportError instead of guessing."""
    n, hidden, arch = target.num_hidden_layers, target.hidden_size, target.architecture
    if n is None or hidden is None or arch is None or target.vocab_size is None:
        raise ManifestImportError(
            "the target config lacks num_hidden_layers, hidden_size, vocab_size or architectures",
            fix="point --target at the target's checkpoint (config.json)",
        )
    ids, recorded, origin = recorded_layers(drafter.config, training)
    chosen = convention or recorded
    if ids is None:
        if chosen is None:
            raise ManifestImportError(
                "the drafter config records no capture ids, so it was trained on its trainer's default layers",
                fix="pass --convention specforge (default [1, N//2-1, N-4]) or vllm (default [2, N//2, N-3]) "
                "to say which trainer made it",
            )
        ids = [1, n // 2 - 1, n - 4] if chosen in ("specforge", "canonical", "sglang") else [2, n // 2, n - 3]
        chosen = "canonical" if chosen in ("specforge", "canonical", "sglang") else chosen
        origin = f"{chosen} default for {n} layers"
    elif chosen is None:
        readings = {
            c: show_layers(layers_from_ids(ids, c, num_layers=n)) for c in ("specforge", "vllm") if min(ids) >= 0
        }
        shown = "; ".join(f"as {c} ids: outputs of layers {layers}" for c, layers in readings.items())
        raise ManifestImportError(
            f"the ids {ids} ({origin}) are ambiguous: {shown}",
            fix="pass --convention specforge|sglang|vllm|canonical, or --training-state with the run's config",
        )
    layers = layers_from_ids(ids, chosen, num_layers=n, engine=engine, engine_version=engine_version, architecture=arch)
    width = len(layers) * hidden
    fc = drafter.fc_weight_shape
    if fc is not None and len(fc) == 2 and fc[1] != width:
        raise ManifestImportError(
            f"{len(layers)} layers x hidden {hidden} = {width}, but the drafter's fc.weight takes {fc[1]}",
            fix="the ids do not describe this drafter's training; pass the right ids or target",
        )
    training_section: dict[str, Any] = {"source_convention": f"{chosen} ({origin})"}
    if training:
        for key, dest in (
            ("tp_size", "tp"),
            ("train_data_path", "dataset"),
            ("dataset", "dataset"),
            ("num_samples", "samples"),
        ):
            value = _find(training, key)
            if value is not None and dest not in training_section:
                training_section[dest] = value
    return {
        "apiVersion": "specctl/v1",
        "kind": "DrafterManifest",
        "metadata": {"name": name, "description": f"imported by specctl from {drafter.source}"},
        "drafter": {"model": drafter_model, "revision": drafter_revision},
        "target": {
            "model": target_model,
            "revision": target_revision,
            "architecture": arch,
            "num_hidden_layers": n,
            "hidden_size": hidden,
            "vocab_size": target.vocab_size,
        },
        "capture": {"layers": layers, "width": width},
        "training": training_section,
    }
