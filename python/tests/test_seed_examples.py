"""Every example of rate-limiter-py's README with only its import line changed
(`from limiter import ...` -> `from turnstile import ...`); the tables come from its variables."""

from __future__ import annotations

import pytest

from turnstile import CapacityExhaustedException, fungible_limiter, non_fungible_limiter, rate_limit
from turnstile.event_processors import EventProcessor, EventProcessorManager, ProcessorPredicate


def test_decorator_positional_argument(name: str) -> None:
    @rate_limit(name, 1, 10, account_id_pos=1)
    def invoke_my_resource(arg_1, account_id):
        return "not rate limited"

    assert invoke_my_resource("x", "account-1234") == "not rate limited"
    with pytest.raises(CapacityExhaustedException) as e:
        invoke_my_resource("x", "account-1234")
    assert e.value.retry_after is not None and 0 < e.value.retry_after <= 10


def test_decorator_keyword_argument(name: str) -> None:
    @rate_limit(name, 1, 10, account_id_key="foo")
    def invoke_my_resource(arg_1, foo="account-1234"):
        return "not rate limited"

    assert invoke_my_resource("x", foo="account-1234") == "not rate limited"
    with pytest.raises(CapacityExhaustedException):
        invoke_my_resource("x", foo="account-1234")


def test_decorator_default_keyword_is_account_id(name: str) -> None:
    @rate_limit(name, 1, 10)
    def invoke_my_resource(arg_1, account_id="account-1234"):
        return "not rate limited"

    assert invoke_my_resource("x", account_id="account-1234") == "not rate limited"
    with pytest.raises(CapacityExhaustedException):
        invoke_my_resource("x", account_id="account-1234")


def test_context_manager(name: str) -> None:
    def invoke_my_resource(account_id):
        with fungible_limiter(name, account_id, 1, 10):
            return "not rate limited"

    assert invoke_my_resource("account-1234") == "not rate limited"
    with pytest.raises(CapacityExhaustedException):
        invoke_my_resource("account-1234")


def test_direct(name: str) -> None:
    def invoke_my_resource(account_id):
        limiter = fungible_limiter(name, account_id, 1, 10)
        limiter.get_token()
        return "not rate limited"

    assert invoke_my_resource("account-1234") == "not rate limited"
    with pytest.raises(CapacityExhaustedException):
        invoke_my_resource("account-1234")


def test_non_fungible_context_manager(name: str) -> None:
    def invoke_my_resource(account_id, emr_cluster_id):
        with non_fungible_limiter(name, account_id, 1) as reservation:
            reservation.create_token(emr_cluster_id)

    invoke_my_resource("account-1234", "j-" + name)
    with pytest.raises(CapacityExhaustedException):
        invoke_my_resource("account-1234", "j-other-" + name)


def test_non_fungible_context_manager_deletes_on_error(name: str) -> None:
    with pytest.raises(RuntimeError):
        with non_fungible_limiter(name, "account-1234", 1):
            raise RuntimeError("create_emr_cluster failed")
    # The failed block's reservation was given back: the one unit is free again.
    with non_fungible_limiter(name, "account-1234", 1) as reservation:
        reservation.create_token("j-" + name)


def test_non_fungible_direct(name: str) -> None:
    limiter = non_fungible_limiter(name, "account-1234", 10)
    reservation = limiter.get_reservation()
    token = reservation.create_token("j-" + name)
    assert token["resourceId"] == "j-" + name
    with pytest.raises(ValueError):
        reservation.create_token("j-again")


def test_event_processors_remove_the_token(name: str) -> None:
    cluster = "j-" + name
    with non_fungible_limiter(name, "account-1234", 1) as reservation:
        reservation.create_token(cluster)
    with pytest.raises(CapacityExhaustedException):
        non_fungible_limiter(name, "account-1234", 1).get_reservation()

    predicate = ProcessorPredicate("detail.name", lambda n: "debugging" not in n)
    processor = EventProcessor("aws.emr", "detail.clusterId", predicate=predicate)
    manager = EventProcessorManager(processors=[processor])  # table and index from the variables

    def handler(event, context):
        return manager.process_event(event)

    debugging = {"source": "aws.emr", "detail": {"clusterId": cluster, "name": "debugging run"}}
    assert handler(debugging, None) == 0  # the predicate says no: nothing removed
    ended = {"source": "aws.emr", "detail": {"clusterId": cluster, "name": "nightly"}}
    assert handler(ended, None) == 1
    non_fungible_limiter(name, "account-1234", 1).get_reservation()  # the unit is free again
