"""Stub of ``torchvision.transforms`` (see ``torchvision/__init__.py`` of this stub).

``sglang.srt.multimodal.internvl_utils`` does ``import torchvision.transforms as T``
and ``sglang.srt.configs.deepseek_ocr`` does
``from torchvision.transforms import InterpolationMode`` and
``from torchvision.transforms import functional as TF`` at import time; only
``InterpolationMode`` is needed as a real value (it appears in default arguments).
The transform classes (``Compose``, ``Resize``, ...) are only referenced inside
functions and raise if ever called.
"""

from typing import Any, NoReturn

from . import functional
from .functional import InterpolationMode

__all__ = ["InterpolationMode", "functional"]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)

    def _unavailable(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError(
            f"torchvision.transforms.{name} is a stub in the sglang CPU venv "
            "(scripts/sglang-cpu/stubs); image preprocessing is not available"
        )

    _unavailable.__name__ = name
    return _unavailable
