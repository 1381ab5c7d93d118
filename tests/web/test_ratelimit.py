"""web/ratelimit: each caller's token bucket, on a fake clock; and the API's 429 with
Retry-After through the app."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hairline.store.db import Store
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.ratelimit import RateLimiter, caller_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_rate_and_each_caller_has_its_own_bucket() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_s=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)  # one back in half a second at 2/s
    assert limiter.take("b") == 0.0  # another caller is not held by a's use
    clock.now += 0.5
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0
    clock.now += 10.0  # refilled, but never past the burst
    assert [limiter.take("a") for _ in range(4)][-1] > 0


def test_idle_callers_are_forgotten_and_a_bad_limit_is_refused() -> None:
    clock = Clock()
    limiter = RateLimiter(rate_per_s=10.0, burst=5, clock=clock)
    for i in range(100):
        limiter.take(f"caller-{i}")
    clock.now += 61.0  # full again after 0.5 s; swept at most once a minute
    limiter.take("new")
    assert len(limiter) == 1
    with pytest.raises(ValueError, match="a rate above 0"):
        RateLimiter(rate_per_s=0.0)
    with pytest.raises(ValueError, match="burst of at least 1"):
        RateLimiter(burst=0)


def test_the_key_is_the_tokens_hash_or_the_address() -> None:
    key = caller_key("hl_secret", "10.0.0.7")
    assert key.startswith("t:") and "hl_secret" not in key
    assert caller_key(None, "10.0.0.7") == "a:10.0.0.7"
    assert caller_key("hl_a", None) != caller_key("hl_b", None)


def test_the_api_answers_429_with_retry_after_past_a_callers_rate(store: Store) -> None:
    """On a stopped clock, so that the bucket refills nothing between the requests: on the
    real one, the first two took about 2 s in a busy suite (fc37, 2026-11-29) and the third
    was told 8 s instead of 10."""
    token = create_token(store, name="ci", team="demo", scope="read")
    limiter = RateLimiter(rate_per_s=0.1, burst=2, clock=Clock())
    client = TestClient(create_app(store, limiter=limiter))
    auth = {"Authorization": f"Bearer {token}"}
    assert [client.get("/api/v1/experiments", headers=auth).status_code for _ in range(2)] == [
        200,
        200,
    ]
    held = client.get("/api/v1/experiments", headers=auth)
    assert held.status_code == 429 and held.headers["retry-after"] == "10"
    assert "at most 0.1 a second" in held.json()["error"]
    assert client.get("/healthz").status_code == 200  # not an API route: never held
