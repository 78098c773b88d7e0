"""A process that ends right after its asyncio calls were answered exits cleanly. A runtime thread
that entered the interpreter to resolve a future could meet its finalization (a segmentation fault
or `Fatal Python error: PyGILState_Release` in about 1 run of 6 of this pattern, bench/peers/
drive.py's); runtime threads now never enter it (answers are resolved on the loop's own thread), and
this keeps it so."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import asyncio, sys
from turnstile import CapacityExhaustedException, fungible_limiter

async def tasks(c, n, account, limit):
    left = iter(range(n))
    async def worker():
        while next(left, None) is not None:
            try:
                async with fungible_limiter(sys.argv[1], account, limit, 3600):
                    pass
            except CapacityExhaustedException:
                pass
    await asyncio.gather(*(worker() for _ in range(c)))

for c in (1, 8, 32):
    asyncio.run(tasks(c, 100, f"c{c}", 100000))
asyncio.run(tasks(16, 320, "accuracy", 50))
"""

RUNS = 16


def test_a_process_exiting_right_after_asyncio_calls_exits_cleanly(name: str) -> None:
    for run in range(RUNS):
        out = subprocess.run([sys.executable, "-c", SCRIPT, f"{name}-{run}"], capture_output=True,
                             text=True, timeout=120, env=dict(os.environ))
        assert out.returncode == 0 and "Fatal Python error" not in out.stderr, (
            f"run {run} of {RUNS}: exit {out.returncode}\n{out.stderr[-2000:]}")
