"""Argument checks: a ``TypeError`` or ``ValueError`` naming the argument, before any call."""

from __future__ import annotations

import os
from typing import Any, Optional

TABLE_BASE_ENV_VAR = "LIMITER_TABLES_BASE_NAME"


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    return value


def integer(name: str, value: Any, minimum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


def number(name: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not value >= minimum:  # also refuses NaN
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return float(value)


def table(name: str, value: Any, env_var: str, suffix: str) -> Optional[str]:
    """rate-limiter-py's order: the argument, then ``env_var``, then ``LIMITER_TABLES_BASE_NAME`` +
    ``suffix``; ``None`` leaves it to Turnstile's own variables (``TURNSTILE_TABLE_PREFIX``...)."""
    if value is not None:
        return text(name, value)
    if os.environ.get(env_var):
        return os.environ[env_var]
    base = os.environ.get(TABLE_BASE_ENV_VAR)
    if base:
        return (base if base.endswith("-") else base + "-") + suffix
    return None
