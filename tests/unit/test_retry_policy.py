"""The retry policy's reading (xmc.model.retry_policy): what a valid policy means, and each
malformed one refused with the key at fault."""

from __future__ import annotations

import pytest

from xmc.model.retry_policy import PolicyError, RetryPolicy, parse_retry_policy, retry_policy_of


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("{}", RetryPolicy(), id="empty: never retried"),
        pytest.param(
            '{"max_attempts": 3, "on_exit_codes": [1, 137], "never_on_exit_codes": [2], '
            '"backoff_seconds": 30}',
            RetryPolicy(3, frozenset({1, 137}), frozenset({2}), 30.0),
            id="the documented example",
        ),
        pytest.param('{"backoff_seconds": 0.5}', RetryPolicy(backoff_seconds=0.5), id="fraction"),
        pytest.param('{"on_exit_codes": []}', RetryPolicy(on_exit_codes=frozenset()), id="none"),
    ],
)
def test_valid_policies(text: str, want: RetryPolicy) -> None:
    assert parse_retry_policy(text) == want


@pytest.mark.parametrize(
    ("text", "key", "detail"),
    [
        pytest.param("{oops", "", "not JSON", id="not JSON"),
        pytest.param("[1]", "", "must be a JSON object", id="not an object"),
        pytest.param('{"max_attempt": 3}', "max_attempt", "unknown key", id="a typo"),
        pytest.param('{"max_attempts": 0}', "max_attempts", "from 1 to 100", id="zero"),
        pytest.param('{"max_attempts": 101}', "max_attempts", "from 1 to 100", id="too many"),
        pytest.param('{"max_attempts": 2.5}', "max_attempts", "whole number", id="fraction"),
        pytest.param('{"max_attempts": true}', "max_attempts", "whole number", id="boolean"),
        pytest.param('{"on_exit_codes": 1}', "on_exit_codes", "a list", id="not a list"),
        pytest.param('{"on_exit_codes": [1, 256]}', "on_exit_codes[1]", "0 to 255", id="code"),
        pytest.param(
            '{"never_on_exit_codes": ["2"]}', "never_on_exit_codes[0]", "whole", id="a string code"
        ),
        pytest.param('{"backoff_seconds": -1}', "backoff_seconds", "from 0 to", id="negative"),
        pytest.param('{"backoff_seconds": "30s"}', "backoff_seconds", "a number", id="unit"),
    ],
)
def test_malformed_policies_name_the_key(text: str, key: str, detail: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_retry_policy(text)
    assert refused.value.key == key
    assert detail in refused.value.detail


def test_a_policy_is_read_from_its_annotation_only() -> None:
    assert retry_policy_of({"other": "x"}) is None
    assert retry_policy_of({"xmc.dev/retry-policy": '{"max_attempts": 2}'}) == RetryPolicy(2)
