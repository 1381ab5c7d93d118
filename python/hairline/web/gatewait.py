"""The client side of a release gate: ask a hairline server (or the local database) for an
experiment's answer, and wait while it is pending.

A pending answer is asked again after the server's ``Retry-After`` (bounded), until the
deadline; the exit status is the same as ``hairline run``'s: 0 pass, 1 fail, 2 error, 3
still pending when the wait ran out.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from hairline.errors import HairlineError
from hairline.kit.secretfiles import secret_from_env

__all__ = [
    "GateAnswer",
    "api_token",
    "exit_status",
    "fetch_gate",
    "fetch_markdown",
    "wait_for_gate",
]

EXIT_BY_ANSWER = {"pass": 0, "fail": 1, "error": 2, "pending": 3}
# Between two asks of a pending gate: never hammer a server, never sleep past a finish.
_MIN_POLL_S = 0.5
_MAX_POLL_S = 30.0
_HTTP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class GateAnswer:
    answer: str  # pass | fail | pending | error
    reason: str
    retry_after_s: float | None = None


def exit_status(answer: str) -> int:
    return EXIT_BY_ANSWER[answer]


def api_token() -> str:
    """The token from ``$HAIRLINE_TOKEN``, or the 0600 file ``$HAIRLINE_TOKEN_FILE`` names."""
    token = secret_from_env("HAIRLINE_TOKEN", "HAIRLINE_TOKEN_FILE", what="API token")
    if not token:
        raise HairlineError(
            "no API token for --url",
            hint="set HAIRLINE_TOKEN, or HAIRLINE_TOKEN_FILE to a file only you may read "
            "(an admin makes one with `hairline token create --team T --scope read`)",
        )
    return token


def _get(url: str, token: str) -> tuple[bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_S) as resp:
            return resp.read(), dict(resp.headers.items())
    except urllib.error.HTTPError as err:
        try:
            body = json.loads(err.read().decode())
        except ValueError:
            body = {}
        raise HairlineError(
            f"{url} answered {err.code}: {body.get('error', err.reason)}",
            hint=body.get("hint") or "check --url, the experiment id and the token's team",
        ) from None
    except (urllib.error.URLError, OSError) as err:
        raise HairlineError(
            f"cannot reach {url}: {getattr(err, 'reason', err)}",
            hint="check --url (e.g. http://127.0.0.1:8080) and that `hairline serve` runs",
        ) from None


def fetch_gate(base_url: str, experiment_id: int, token: str) -> GateAnswer:
    raw, headers = _get(f"{base_url.rstrip('/')}/api/v1/experiments/{experiment_id}/gate", token)
    body = json.loads(raw.decode())
    retry = {k.lower(): v for k, v in headers.items()}.get("retry-after")
    return GateAnswer(
        answer=str(body["answer"]),
        reason=str(body.get("reason", "")),
        retry_after_s=float(retry) if retry and retry.replace(".", "", 1).isdigit() else None,
    )


def fetch_markdown(base_url: str, experiment_id: int, token: str) -> str:
    url = f"{base_url.rstrip('/')}/api/v1/experiments/{experiment_id}/report.md"
    return _get(url, token)[0].decode()


def fetch_junit(base_url: str, experiment_id: int, token: str) -> str:
    url = f"{base_url.rstrip('/')}/api/v1/experiments/{experiment_id}/report.xml"
    return _get(url, token)[0].decode()


def wait_for_gate(
    ask: Callable[[], GateAnswer],
    *,
    wait: bool,
    timeout_s: float,
    poll_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_pending: Callable[[GateAnswer], None] = lambda _answer: None,
) -> GateAnswer:
    """Ask once, or with ``wait`` until the answer is not pending or ``timeout_s`` passed
    (0 = no limit); the last answer."""
    deadline = clock() + timeout_s if timeout_s > 0 else None
    while True:
        answer = ask()
        if answer.answer != "pending" or not wait:
            return answer
        on_pending(answer)
        pause = answer.retry_after_s if answer.retry_after_s is not None else poll_s
        pause = min(max(pause, _MIN_POLL_S), _MAX_POLL_S)
        if deadline is not None:
            left = deadline - clock()
            if left <= 0:
                return answer
            pause = min(pause, left)
        sleep(pause)
