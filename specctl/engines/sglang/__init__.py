"""SGLang: its capture convention table, launch-flag catalogs, launch argv and drafter-config keys.

Everything specctl knows about SGLang lives in this package; the data under data/ is generated
from real sglang releases by scripts/gen_sglang_conventions.py and scripts/gen_sglang_flags.py.
"""

from __future__ import annotations

from specctl.engines.sglang.engine import SGLANG, SGLangEngine

__all__ = ["SGLANG", "SGLangEngine"]
