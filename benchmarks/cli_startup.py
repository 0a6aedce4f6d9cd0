"""`shapelm --help` against `python -c "import torch"`: the command list imports no stage.

Each command is timed as a subprocess, several times, and the medians compared: the goal is a
help listing under 1 s, well below the ratio 1 (one torch import).
"""

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEATS = 7
SHAPELM = Path(sys.executable).with_name("shapelm")


def median_seconds(cmd: list[str]) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    help_s = median_seconds([str(SHAPELM), "--help"])
    torch_s = median_seconds([sys.executable, "-c", "import torch"])
    print(f"shapelm --help: {help_s:.3f} s; python -c 'import torch': {torch_s:.3f} s "
          f"(medians of {REPEATS}); ratio {help_s / torch_s:.2f}x")
    print(f"goal: shapelm --help < 1 s: {'OK' if help_s < 1 else 'SLOW'}")


if __name__ == "__main__":
    main()
