"""Bad arguments are TypeError / ValueError naming the argument, before any call; DynamoDB
failures are the documented exceptions."""

from __future__ import annotations

import asyncio

import pytest

from turnstile import (
    CapacityExhaustedException,
    RateLimiterException,
    ReservationNotFoundException,
    _native,
    fungible_limiter,
    non_fungible_limiter,
    rate_limit,
)
from turnstile.kv import AsyncLimiter, Limiter

from conftest import KV_YAML


@pytest.mark.parametrize("call, exc, word", [
    (lambda: rate_limit(123, 1, 10), TypeError, "resource_name"),
    (lambda: rate_limit("", 1, 10), ValueError, "resource_name"),
    (lambda: rate_limit("r", "1", 10), TypeError, "default_limit"),
    (lambda: rate_limit("r", True, 10), TypeError, "default_limit"),
    (lambda: rate_limit("r", 1, 0), ValueError, "default_window"),
    (lambda: rate_limit("r", 1, 10, account_id_pos=-1), ValueError, "account_id_pos"),
    (lambda: rate_limit("r", 1, 10, token_table=5), TypeError, "token_table"),
    (lambda: fungible_limiter("r", None, 1, 10), TypeError, "account_id"),
    (lambda: fungible_limiter("r", "", 1, 10), ValueError, "account_id"),
    (lambda: non_fungible_limiter("r", "a", 1.5), TypeError, "default_limit"),
    (lambda: _native.get_token("r", "a", "lots", 10), TypeError, "limit"),
    (lambda: Limiter(KV_YAML).spend("ApiCallsPerKey", "k", 0), ValueError, "cost"),
    (lambda: Limiter(KV_YAML).spend("ApiCallsPerKey", 7), TypeError, "id"),
    (lambda: Limiter(KV_YAML).batch([("ApiCallsPerKey", "k")]), TypeError, "spends[0]"),
    (lambda: Limiter(KV_YAML).acquire_lease("ApiCallsPerKey", "k", "l", 1, ttl=-1), ValueError, "ttl"),
    (lambda: Limiter("names: [oops"), ValueError, "limits"),
])
def test_bad_arguments_name_the_argument(call, exc, word) -> None:
    with pytest.raises(exc, match=word.replace("[", r"\[")):
        call()


def test_a_missing_account_argument_is_a_type_error(name: str) -> None:
    @rate_limit(name, 1, 10, account_id_key="tenant")
    def f(x, tenant=None):
        return x

    with pytest.raises(TypeError, match="tenant"):
        f(1)


def test_an_unknown_kv_name_or_bad_id_is_a_value_error() -> None:
    limiter = Limiter(KV_YAML)
    with pytest.raises(ValueError, match="NoSuchLimit"):
        limiter.spend("NoSuchLimit", "k")
    with pytest.raises(ValueError):
        limiter.spend("NewOrdersPerAccount", "not-a-number")


def test_an_unknown_kv_name_is_a_value_error_from_asyncio() -> None:
    with pytest.raises(ValueError, match="NoSuchLimit"):
        asyncio.run(AsyncLimiter(KV_YAML).spend("NoSuchLimit", "k"))


def test_a_missing_table_is_a_rate_limiter_exception(name: str) -> None:
    with pytest.raises(RateLimiterException, match="no-such-table|ResourceNotFound|not exist"):
        fungible_limiter(name, "a", 1, 10, token_table="no-such-table").get_token()
    with pytest.raises(RateLimiterException):
        asyncio.run(fungible_limiter(name, "a", 1, 10, token_table="no-such-table").get_token_async())


def test_a_blocked_account_is_capacity_exhausted_with_no_retry(name: str) -> None:
    with pytest.raises(CapacityExhaustedException) as e:
        fungible_limiter(name, "a", 0, 10).get_token()
    assert e.value.retry_after is None


def test_binding_a_deleted_reservation_is_reservation_not_found(name: str) -> None:
    limiter = non_fungible_limiter(name, "a", 2)
    reservation = limiter.get_reservation()
    _native.delete_reservation(name, "a", reservation.id)
    with pytest.raises(ReservationNotFoundException):
        reservation.create_token("j-" + name)
