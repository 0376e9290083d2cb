"""`specctl check` on a 64-shard, 1 TB (sparse) checkpoint against a 1-shard tiny one, in one run.

Only safetensors headers are read, so the ratio should stay near 1 (goal: under 1.5). Measured
both in-process (the check itself) and as a CLI invocation (what a user waits for).

    python benchmarks/sparse_checkpoint.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import interleaved, wall  # noqa: E402
from tests.factory import Scenario  # noqa: E402


def scenario(root: Path, big: bool) -> Path:
    s = Scenario(root)
    if big:  # a dense ~1 TB model: 160 layers of hidden 16384 in BF16, 64 shards
        s.target_config.update(hidden_size=16384, intermediate_size=53248, num_hidden_layers=160, num_attention_heads=128,
                               num_key_value_heads=8, vocab_size=128256)
        s.manifest["target"].update(hidden_size=16384, num_hidden_layers=160, vocab_size=128256)
        s.manifest["capture"].update(layers=[1, 79, 156], width=3 * 16384)
        s.drafter_config.update(hidden_size=16384, vocab_size=128256, num_attention_heads=128, num_key_value_heads=8,
                                intermediate_size=53248, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 79, 156]})
        s.profile["parallel"] = {"tp": 8}
        s.profile["hardware"] = {"gpu": "b300", "gpus_per_node": 8}
        s.target_shards = 64
    else:
        s.target_shards = 1
    return s.write()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    from specctl.facts.checkpoint import read_checkpoint
    from specctl.flows import static

    env = {**os.environ, "NO_COLOR": "1"}
    specctl = str(Path(sys.executable).parent / "specctl")
    with tempfile.TemporaryDirectory() as tmp:
        tiny = scenario(Path(tmp) / "tiny", big=False)
        big = scenario(Path(tmp) / "big", big=True)
        size = read_checkpoint(str(Path(tmp) / "big" / "target")).weight_bytes
        shards = len(list((Path(tmp) / "big" / "target").glob("*.safetensors")))

        def in_process(path: Path) -> float:
            start = time.perf_counter()
            static.check(path)
            return time.perf_counter() - start

        medians = interleaved({
            "tiny, in-process": lambda: in_process(tiny), "1 TB, in-process": lambda: in_process(big),
            "tiny, CLI": lambda: wall([specctl, "check", str(tiny)], env), "1 TB, CLI": lambda: wall([specctl, "check", str(big)], env),
        }, args.repeat)
    print(f"big checkpoint: {shards} shards, {size / 1e12:.2f} TB (sparse); tiny: 1 shard")
    for name, t in medians.items():
        print(f"{name:<18} {t * 1000:>8.1f} ms")
    print(f"ratio in-process: {medians['1 TB, in-process'] / medians['tiny, in-process']:.2f}   "
          f"ratio CLI: {medians['1 TB, CLI'] / medians['tiny, CLI']:.2f}   (goal < 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
