"""The canonical capture frame, which engines, their conventions and manifests share.

Canonical layer L is the output of decoder layer L (the residual stream after it, before the
final norm) = HF `hidden_states[L+1]` = engine capture position L+1; `embedding` is position 0.
Engines translate their drafter-config ids to positions; manifests speak canonical layers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

EMBEDDING = "embedding"

Layer = int | str  # a decoder layer index, or EMBEDDING


def position_of(layer: Layer) -> int:
    """Capture position of a canonical layer."""
    if layer == EMBEDDING:
        return 0
    if not isinstance(layer, int):
        raise ValueError(f"not a canonical layer: {layer!r}")
    return layer + 1


def layer_of(position: int) -> Layer:
    """Canonical layer captured at an engine position."""
    return EMBEDDING if position == 0 else position - 1


def positions_of(layers: Iterable[Layer]) -> list[int]:
    return [position_of(layer) for layer in layers]


def layers_of(positions: Iterable[int]) -> list[Layer]:
    return [layer_of(p) for p in positions]


def show_layers(layers: Sequence[Layer]) -> str:
    """`[embedding, 2, 30]`: how layer lists appear in messages."""
    return "[" + ", ".join(str(layer) for layer in layers) + "]"


def show_positions(positions: Sequence[int]) -> str:
    return "[" + ", ".join(str(p) for p in positions) + "]"
