"""Import-only stand-in for ``torchvision`` in the CPU sglang conformance venv.

Why it exists
-------------
Importing the sglang 0.5.23 model modules (``sglang.srt.models.llama`` and the
others) goes through ``sglang.srt.layers.linear`` -> ``sglang.srt.layers.moe`` ->
``sglang.srt.configs/__init__.py`` -> ``sglang.srt.configs.nano_nemotron_vl`` ->
``sglang.srt.multimodal.internvl_utils``, which does at module level::

    import torchvision.transforms as T
    from torchvision.transforms.functional import InterpolationMode

(``sglang.srt.configs.deepseek_ocr`` likewise imports ``InterpolationMode`` and
``torchvision.transforms.functional``).  Nothing on that path calls torchvision
at import time; the names are only used inside image-preprocessing functions.

Why the real package cannot be used
-----------------------------------
PyPI only ships CUDA builds of torchvision.  The build matching our CPU torch
(torchvision 0.28.0 <-> torch 2.13.0) fails to import against ``torch 2.13.0+cpu``
with ``RuntimeError: operator torchvision::nms does not exist`` (its ``_C.so``
links against CUDA torch libraries and cannot be loaded), and torchvision 0.29.x
requires torch 2.14.1, whose only wheel is a ~5.5 GB CUDA build.  The CPU wheels
on download.pytorch.org are not reachable from CI.

This stub has no ``*.dist-info``, so ``transformers`` still reports torchvision as
unavailable and never tries to use it.  Any real use fails loudly with
AttributeError / RuntimeError instead of computing something wrong.
"""

__version__ = "0.0.0+sglang-cpu-stub"
IS_SGLANG_CPU_STUB = True
