"""Limits before work: an API request is held to its caller's rate, one that sends a body
is authenticated before its body is read, and no body is read past its size limit.

FastAPI reads and parses a route's body before it resolves the route's dependencies (where
the token is checked), so without this an unauthenticated 300 MB POST was read whole, and
took the server from 1.44 GB to 2.34 GB, before its 401. This ASGI middleware runs first:

1. an ``/api/`` request past its caller's rate (web/ratelimit.py: by token, or by address
   without one) answers 429 with ``Retry-After``;
2. an ``/api/`` request with a body and no live token answers 401 at once (the pages'
   forms are small and keep their own sign-in flow); but a webhook of a tool that sends
   no headers (Flagger's) carries its token in its body, which is then read, to a small
   limit, for the route to check;
3. a body declared larger than the path's limit (``Content-Length``) answers 413 at once;
4. a body without a declared length is read up to the limit and answers 413 past it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from anyio import to_thread
from starlette.requests import Request

from hairline.store.db import Store
from hairline.web.auth import principal_for
from hairline.web.deps import TOKEN_REQUIRED, request_token
from hairline.web.ratelimit import RateLimiter, caller_key

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_SUBMISSION_BYTES",
    "MAX_WEBHOOK_BYTES",
    "TOKEN_IN_BODY_PATHS",
    "RequestLimits",
    "body_limit",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# A submission carries its service file, trace and an arm's files (at most 64, web/submit);
# a trace of a few hundred thousand requests is tens of MB.
MAX_SUBMISSION_BYTES = 64 << 20
# Every other body: a JSON object of a few fields, or a page's form.
MAX_BODY_BYTES = 1 << 20
# Paths whose callers cannot send an Authorization header and put the token in the body
# (web/judge.py): Flagger's webhook, whose payload is a few hundred bytes.
TOKEN_IN_BODY_PATHS = frozenset({"/api/v1/webhooks/flagger"})
MAX_WEBHOOK_BYTES = 16 << 10
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def body_limit(method: str, path: str) -> int:
    """The largest body ``method path`` may send (pure)."""
    if method == "POST" and path.rstrip("/") == "/api/v1/experiments":
        return MAX_SUBMISSION_BYTES
    if path.rstrip("/") in TOKEN_IN_BODY_PATHS:
        return MAX_WEBHOOK_BYTES
    return MAX_BODY_BYTES


class RequestLimits:
    """The middleware (``app.add_middleware(RequestLimits, store=store, limiter=...)``)."""

    def __init__(self, app: App, *, store: Store, limiter: RateLimiter) -> None:
        self.app = app
        self.store = store
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith("/api/"):
            client = scope.get("client")
            key = caller_key(request_token(Request(scope)), client[0] if client else None)
            wait_s = self.limiter.take(key)
            if wait_s > 0:
                retry = str(max(1, math.ceil(wait_s)))
                await _answer(
                    send, 429,
                    f"too many requests from this caller: at most {self.limiter.rate_per_s:g} a "
                    f"second (bursts of {self.limiter.burst}); ask again in {retry} s",
                    extra=[(b"retry-after", retry.encode())],
                )  # fmt: skip
                return
        if scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope["method"], path)
        token_in_body = path.rstrip("/") in TOKEN_IN_BODY_PATHS
        if path.startswith("/api/") and not token_in_body and not await self._authenticated(scope):
            await _answer(send, 401, TOKEN_REQUIRED, extra=[(b"www-authenticate", b"Bearer")])
            return
        declared = Request(scope).headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _answer(send, 413, _too_large(limit))
            return
        if declared is not None:
            await self.app(scope, receive, send)
            return
        body = await _read_at_most(receive, limit)
        if body is None:
            await _answer(send, 413, _too_large(limit))
            return
        await self.app(scope, _replay(body, receive), send)

    async def _authenticated(self, scope: Scope) -> bool:
        token = request_token(Request(scope))
        if token is None:
            return False
        # principal_for is the routes' own check (a database read, off the event loop).
        who = await to_thread.run_sync(principal_for, self.store, token)
        return who is not None


def _too_large(limit: int) -> str:
    return (
        f"the request body is larger than this endpoint's limit of {limit:,} bytes; send "
        "smaller files (a trace can be sampled: `hairline trace sample`)"
    )


async def _read_at_most(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(
    send: Send, status: int, message: str, *, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A JSON error in the API's shape; the connection is closed after it (the unread body
    is not drained)."""
    body = json.dumps({"error": message, "hint": None}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
