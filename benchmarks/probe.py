"""How long the engine probe takes against the real sglang 0.5.23 (CPU environment), in one run.

The probe imports only the asked architecture's model module and the server-args module; the goal
is under 10 s per probe. Run after `make sglang-env`:

    python benchmarks/probe.py [--python .venv-sglang/bin/python] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specctl.engines import get_engine  # noqa: E402
from specctl.flows.probe import run_probe  # noqa: E402

KIMI_ARGV = ["python", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.5", "--speculative-algorithm", "EAGLE3",
             "--speculative-draft-model-path", "/r/drafter-overlay", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4", "--tp-size", "8", "--host", "0.0.0.0", "--port", "30000"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python", default=str(ROOT / ".venv-sglang" / "bin" / "python"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    engine = get_engine("sglang")
    script = str(engine.probe_script())
    cases = {
        "capture only (KimiK25, 61 layers)": engine.probe_request("KimiK25ForConditionalGeneration", 61, [[2, 30, 58]], [3, 31, 59], []),
        "parse only (1 argv)": engine.probe_request(None, None, [], None, [KIMI_ARGV]),
        "check's full probe (capture + parse)": engine.probe_request("KimiK25ForConditionalGeneration", 61, [[2, 30, 58]], [3, 31, 59], [KIMI_ARGV]),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, request in cases.items():
            start = time.perf_counter()
            answer = run_probe(args.python, script, request)
            samples[name].append(time.perf_counter() - start)
            if "error" in answer:
                print(f"{name}: {answer['error']}")
                return 1
    for name, values in samples.items():
        print(f"{name:<40} median {statistics.median(values):5.2f} s  max {max(values):5.2f} s  (goal < 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
