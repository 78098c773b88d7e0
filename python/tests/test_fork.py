"""After fork() (gunicorn, multiprocessing): the child builds its own runtime and client."""

from __future__ import annotations

import multiprocessing
import os
import signal

from turnstile import fungible_limiter
from turnstile.kv import Limiter

from conftest import KV_YAML


def _child_work(resource: str) -> bool:
    signal.alarm(60)  # a child stuck on its parent's runtime fails instead of hanging the suite
    d = fungible_limiter(resource, "child", 100, 3600).get_token()
    outcome = Limiter(KV_YAML).spend("ApiCallsPerKey", resource + "-child")
    return d.granted and outcome["allowed"]


def test_a_forked_child_keeps_working(name: str) -> None:
    # The parent has a runtime, a client and a warm limiter before it forks.
    assert fungible_limiter(name, "parent", 100, 3600).get_token().granted
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            code = 0 if _child_work(name) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    # The parent's runtime still serves it.
    assert fungible_limiter(name, "parent", 100, 3600).get_token().remaining == 98


def test_multiprocessing_fork_workers(name: str) -> None:
    assert fungible_limiter(name, "warm", 100, 3600).get_token().granted
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(3) as pool:
        assert pool.map(_child_work, [name + "-a", name + "-b", name + "-c"]) == [True, True, True]
