"""``python -m bench.profiled_relay STATS``: ``relay serve`` under cProfile, profiling only
between SIGUSR1 (start) and SIGUSR2 (stop), so a bench leaves the relay's startup, its
warm-up requests and its shutdown out of the profile; the stats go to STATS on exit.

(cProfile follows the main thread only; the relay serves on it.)
"""

from __future__ import annotations

import cProfile
import signal
import sys

from relay.app.cli import main


def run(stats: str) -> int:
    profiler = cProfile.Profile()
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, lambda *_: profiler.disable())
    try:
        return main(["serve"])
    finally:
        profiler.disable()
        profiler.dump_stats(stats)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
