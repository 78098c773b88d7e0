"""A process that exits while asyncio calls are still running on the Rust runtime exits cleanly: the
runtime's threads must not enter the interpreter while it finalizes."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import asyncio, sys
from turnstile import fungible_limiter

async def attempt():
    try:
        async with fungible_limiter(sys.argv[1], "acct", 1000, 60):
            pass
    except Exception:
        pass

async def main():
    tasks = [asyncio.ensure_future(attempt()) for _ in range(64)]
    await asyncio.sleep(0.01)  # some answered, most still in flight when the process ends

asyncio.run(main())
"""


def test_exiting_with_asyncio_calls_in_flight_does_not_abort(name: str) -> None:
    for run in range(8):
        out = subprocess.run([sys.executable, "-c", SCRIPT, f"{name}-{run}"], capture_output=True,
                             text=True, timeout=120, env=dict(os.environ))
        assert out.returncode == 0 and "Fatal Python error" not in out.stderr, (
            f"run {run}: exit {out.returncode}\n{out.stderr[-2000:]}")
