"""The release gate as progressive-delivery tools ask it (docs/ci.md, "Argo Rollouts and
Flagger"): Argo Rollouts' ``web`` metric provider reads ``gate`` (or ``score``) from
``GET /api/v1/experiments/{id}/gate``; Flagger's webhooks POST to
``/api/v1/webhooks/flagger`` and go on only on a 2xx.

``gate`` says in one word what such a tool acts on. Judged by the verdicts (the default,
``judge=gate``): ``pass`` and ``error`` as the gate's answer; ``fail`` when a deciding
regression nobody ignored fails it; ``inconclusive`` when only inconclusive verdicts fail
it (Argo Rollouts then pauses for a person, as its Inconclusive measurements do);
``pending`` while it runs. Judged by the score (``judge=score``, report/scorecard.py): a
passing score ``pass``, a marginal one (or none) ``inconclusive``, a failing one ``fail``.

A tool that asks once may wait for the experiment to end: ``wait_s`` holds the request
while the experiment is pending, asking the database every :data:`SETTLE_POLL_S` without
holding a server thread.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select

from hairline.config import ScoreConfig
from hairline.errors import HairlineError
from hairline.report.scorecard import Scorecard, scorecard
from hairline.store.db import Store
from hairline.store.models import Experiment
from hairline.web.apimodels import JudgeQuery
from hairline.web.queries import Gate

__all__ = [
    "FLAGGER_KEYS",
    "SETTLE_POLL_S",
    "BadJudgeQuery",
    "delivery_gate",
    "flagger_request",
    "parse_weights",
    "score_config_of",
    "scorecard_of",
    "settled",
]

# Between two reads of a pending experiment's gate while a request waits: a trial takes
# tens of seconds, and a read is one indexed query.
SETTLE_POLL_S = 1.0
# A Flagger webhook's metadata keys besides JudgeQuery's fields.
FLAGGER_KEYS = ("experiment", "token")


class BadJudgeQuery(HairlineError):
    """A query parameter or webhook metadata that cannot be used (answers 422)."""

    status = 422


def delivery_gate(gate: Gate, card: Scorecard | None, judge: str) -> str:
    """pass | fail | inconclusive | pending | error: what a delivery tool acts on."""
    if gate.answer in ("pending", "error"):
        return gate.answer
    if judge == "score":
        result = card.result if card is not None else "nodata"
        return {"pass": "pass", "fail": "fail"}.get(result, "inconclusive")
    if gate.answer == "pass":
        return "pass"
    failing = [r for r in gate.regressions if r.triage != "ignored"]
    return "fail" if failing else "inconclusive"


def parse_weights(text: str) -> dict[str, float]:
    """``"cpu:3,memory:1"`` as {group: weight}."""
    weights: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition(":")
        try:
            weight = float(value) if sep else float("nan")
        except ValueError:
            weight = float("nan")
        if not name.strip() or not weight > 0 or weight == float("inf"):
            raise BadJudgeQuery(
                f"weights: {item!r} is not GROUP:WEIGHT with a positive weight",
                hint="e.g. weights=cpu:3,memory:1, naming groups of [analysis.score.groups]",
            )
        weights[name.strip()] = weight
    return weights


def score_config_of(store: Store, experiment_id: int) -> ScoreConfig:
    """The experiment file's ``[analysis.score]`` as the experiment was submitted (the
    default for one submitted before scores existed)."""
    with store.autocommit() as connection:
        spec = connection.scalar(select(Experiment.spec).where(Experiment.id == experiment_id))
    analysis = json.loads(spec or "{}").get("analysis") or {}
    return ScoreConfig.model_validate(analysis.get("score") or {})


def _overridden(config: ScoreConfig, query: JudgeQuery) -> ScoreConfig:
    """``config`` with the request's weights and thresholds, validated as the file's are."""
    fields: dict[str, Any] = config.model_dump()
    if query.weights:
        for name, weight in parse_weights(query.weights).items():
            if name not in config.groups:
                known = ", ".join(config.groups) or "none (every metric is in one group)"
                raise BadJudgeQuery(
                    f"weights: the experiment has no score group {name!r}",
                    hint=f"its [analysis.score.groups] are: {known}",
                )
            fields["groups"][name]["weight"] = weight
    for name in ("pass_score", "marginal_score"):
        if getattr(query, name) is not None:
            fields[name] = getattr(query, name)
    try:
        return ScoreConfig.model_validate(fields)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "score"
        raise BadJudgeQuery(
            f"the score's settings for this request are not valid: {field}: {first['msg']}",
            hint="a weight is above 0 and at most 1,000,000; pass_score and marginal_score "
            "are 0-100, marginal_score at most pass_score",
        ) from None


def scorecard_of(store: Store, gate: Gate, query: JudgeQuery) -> Scorecard | None:
    """The ended experiment's scorecard by its file's score settings and the request's;
    None while it runs or when it failed."""
    if gate.answer not in ("pass", "fail"):
        return None
    config = _overridden(score_config_of(store, gate.experiment_id), query)
    return scorecard(gate.judged, config, inconclusive_passes=gate.inconclusive_passes)


async def settled(
    ask: Callable[[], Gate],
    wait_s: float,
    *,
    poll_s: float = SETTLE_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Gate:
    """The gate once it is not pending, or when ``wait_s`` has passed; ``ask`` (a database
    read) runs in a worker thread, the waiting on the event loop."""
    deadline = clock() + wait_s
    gate = await asyncio.to_thread(ask)
    while gate.answer == "pending":
        left = deadline - clock()
        if left <= 0:
            break
        await sleep(min(poll_s, left))
        gate = await asyncio.to_thread(ask)
    return gate


def flagger_request(
    metadata: Mapping[str, str], header_token: str | None
) -> tuple[int, JudgeQuery, str | None]:
    """(experiment id, how to judge, token) from a Flagger webhook's metadata. Flagger
    sends no headers of its own, so the token may be ``metadata.token``; an Authorization
    header (a proxy's) wins. An unknown key is an error: a misspelt ``wieghts`` would
    otherwise be ignored in silence."""
    known = (*FLAGGER_KEYS, *JudgeQuery.model_fields)
    unknown = sorted(set(metadata) - set(known))
    if unknown:
        raise BadJudgeQuery(
            f"metadata: unknown key(s) {', '.join(unknown)}",
            hint=f"a hairline webhook's metadata may hold: {', '.join(known)}",
        )
    raw = metadata.get("experiment", "").strip()
    if not raw.isdigit() or not 1 <= int(raw) <= 2**63 - 1:
        raise BadJudgeQuery(
            f"metadata.experiment: {raw!r} is not an experiment id",
            hint='set metadata: {experiment: "42"} (the id `hairline run` or the API printed)',
        )
    try:
        query = JudgeQuery.model_validate({k: v for k, v in metadata.items()
                                           if k in JudgeQuery.model_fields})  # fmt: skip
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise BadJudgeQuery(
            f"metadata.{field}: {first['msg']}",
            hint="judge is gate or score; pass_score and marginal_score 0-100; wait_s 0-600",
        ) from None
    return int(raw), query, header_token or metadata.get("token") or None
