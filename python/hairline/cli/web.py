"""``hairline token|service|gate``: the HTTP API's tokens, the commands a submitted service
file may name, and the release gate a CI job blocks on (docs/dashboard.md, "HTTP API")."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from hairline.cli._base import EXIT_WAITING, console, main
from hairline.cli._options import junit_option, store_options
from hairline.cli._outputs import OutputFile, stdout_taken, write_output
from hairline.report.markdown import append_step_summary
from hairline.store.db import Store, open_store
from hairline.web.auth import SCOPES, create_token, list_tokens, revoke_token
from hairline.web.commands import list_commands, register_command
from hairline.web.gatewait import (
    GateAnswer,
    api_token,
    exit_status,
    fetch_gate,
    fetch_junit,
    fetch_markdown,
    wait_for_gate,
)
from hairline.web.queries import GATE_POLICIES, set_gate_policy

# The gate's wait, as `hairline run --wait-s`: a CI job should not sit until its own
# timeout kills it without a word.
GATE_TIMEOUT_S = 3600.0
assert exit_status("pending") == EXIT_WAITING


@main.group()
def token() -> None:
    """API tokens for `hairline serve` (stored hashed; shown once when made)."""


@token.command("create")
@store_options
@click.option("--team", required=True, help="The team whose experiments it sees.")
@click.option("--scope", type=click.Choice(SCOPES), required=True,
              help="read: list and show; submit: also submit and cancel; admin: also "
              "register commands and see every team.")  # fmt: skip
@click.option("--name", help="A name to list and revoke it by (default TEAM-SCOPE-time).")
def token_create(db_url: str | None, home: Path, team: str, scope: str, name: str | None) -> None:
    """Make a token; it is printed once, on stdout (only its hash is kept)."""
    store = open_store(db_url, home=home)
    try:
        chosen = name or f"{team}-{scope}-{int(time.time())}"
        made = create_token(store, name=chosen, team=team, scope=scope)
    finally:
        store.close()
    click.echo(f"token {chosen!r} (team {team}, scope {scope}); it is not shown again:", err=True)
    click.echo(made)


@token.command("list")
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def token_list(db_url: str | None, home: Path, as_json: bool) -> None:
    """The tokens: name, team, scope, when made and last used, revoked or not."""
    store = open_store(db_url, home=home, read_only=True)
    try:
        rows = list_tokens(store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        state = "revoked" if row["revoked"] else "live"
        used = row["last_used_at"]
        last = time.strftime("%Y-%m-%d %H:%M", time.localtime(used)) if used else "never"
        click.echo(f"{row['name']}\tteam {row['team']}\t{row['scope']}\t{state}\tused {last}")


@token.command("revoke")
@store_options
@click.argument("name")
def token_revoke(db_url: str | None, home: Path, name: str) -> None:
    """Revoke a token at once: its next request answers 401."""
    store = open_store(db_url, home=home)
    try:
        revoke_token(store, name)
    finally:
        store.close()
    click.echo(f"revoked {name}")


@main.group()
def service() -> None:
    """What a service file submitted over the HTTP API may run."""


@service.command("register")
@store_options
@click.argument("name")
@click.option("--start", "start", help="The service file's exact start command.")
@click.option("--build", "build", help="The service file's exact [service.build] command.")
@click.option("--env", "env_keys", multiple=True, metavar="KEY",
              help="An environment key the service's submissions may set, beyond the default "
              "allowlist (docs/dashboard.md). Repeatable.")  # fmt: skip
def service_register(
    db_url: str | None,
    home: Path,
    name: str,
    start: str | None,
    build: str | None,
    env_keys: tuple[str, ...],
) -> None:
    """Register a start and/or build command of service NAME, word for word as its file
    writes it (placeholders unfilled), and environment keys: files submitted over the API
    may name these only."""
    if start is None and build is None and not env_keys:
        raise click.UsageError("give --start CMD, --build CMD, --env KEY or several")
    wanted = [("start", start), ("build", build), *(("env", key) for key in env_keys)]
    store = open_store(db_url, home=home)
    try:
        for kind, command in wanted:
            if command is not None:
                new = register_command(store, service=name, kind=kind, command=command,
                                       actor="cli")  # fmt: skip
                what = f"environment key {command}" if kind == "env" else f"{kind} command"
                click.echo(f"{what} of {name} " + ("registered" if new else "was registered"))
    finally:
        store.close()


@service.command("gate")
@store_options
@click.argument("name")
@click.option("--inconclusive", type=click.Choice(GATE_POLICIES), required=True,
              help="What an inconclusive deciding verdict does to NAME's gate: fail (the "
              "default: a gate passes only what it could tell) or pass.")  # fmt: skip
def service_gate(db_url: str | None, home: Path, name: str, inconclusive: str) -> None:
    """Set service NAME's gate policy (an admin's call; in the audit log)."""
    store = open_store(db_url, home=home)
    try:
        set_gate_policy(store, name, inconclusive, actor="cli")
    finally:
        store.close()
    click.echo(f"gate of {name}: an inconclusive deciding verdict now {inconclusive}s")


@service.command("commands")
@store_options
@click.argument("name", required=False)
def service_commands(db_url: str | None, home: Path, name: str | None) -> None:
    """The registered commands (of service NAME, or of every service)."""
    store = open_store(db_url, home=home, read_only=True)
    try:
        rows = list_commands(store, name)
    finally:
        store.close()
    for row in rows:
        click.echo(f"{row.service}\t{row.kind}\t{row.command}\t(by {row.registered_by})")


@main.command()
@store_options
@click.argument("experiment_id", type=int)
@click.option("--wait", is_flag=True, help="Wait while the answer is pending.")
@click.option("--timeout-s", type=click.FloatRange(0), default=GATE_TIMEOUT_S,
              show_default=True,
              help="With --wait: give up (exit 3) after this long; 0 = never.")  # fmt: skip
@click.option("--url", metavar="URL",
              help="A hairline server (token from $HAIRLINE_TOKEN or $HAIRLINE_TOKEN_FILE); "
              "default: the database of --db/--home.")  # fmt: skip
@click.option("--markdown", "markdown_path", type=OutputFile(),
              help="Write the Markdown report ('-' for stdout); also appended to "
              "$GITHUB_STEP_SUMMARY when that is set.")  # fmt: skip
@junit_option
def gate(
    db_url: str | None,
    home: Path,
    experiment_id: int,
    wait: bool,
    timeout_s: float,
    url: str | None,
    markdown_path: Path | None,
    junit_path: Path | None,
) -> None:
    """The release gate of EXPERIMENT_ID: exit 0 pass, 1 fail (a regression nobody
    ignored), 2 error (failed or cancelled), 3 still pending (with --wait: timed out)."""
    store: Store | None = None
    if url is not None:
        token_text = api_token()

        def ask() -> GateAnswer:
            return fetch_gate(url, experiment_id, token_text)

        def markdown() -> str:
            return fetch_markdown(url, experiment_id, token_text)

        def junit() -> str:
            return fetch_junit(url, experiment_id, token_text)

    else:
        from hairline.report.experiment import load_report
        from hairline.report.markdown import render_markdown
        from hairline.web.queries import gate_junit, gate_of

        local = store = open_store(db_url, home=home, read_only=True)

        def ask() -> GateAnswer:
            found = gate_of(local, experiment_id)
            return GateAnswer(found.answer, found.reason)

        def markdown() -> str:
            return render_markdown(load_report(local, experiment_id))

        def junit() -> str:
            return gate_junit(local, experiment_id)

    def pending(answer: GateAnswer) -> None:
        click.echo(f"pending: {answer.reason}", err=True)

    try:
        answer = wait_for_gate(ask, wait=wait, timeout_s=timeout_s, on_pending=pending)
        # On stderr when a document goes to stdout, which then holds that document alone.
        click.echo(f"experiment {experiment_id}: {answer.answer} ({answer.reason})",
                   err=stdout_taken() is not None)  # fmt: skip
        out = console()
        if markdown_path is not None:
            text = markdown()
            write_output(out, markdown_path, text)
            append_step_summary(text)
        if junit_path is not None and answer.answer != "pending":
            write_output(out, junit_path, junit())
    finally:
        if store is not None:
            store.close()
    sys.exit(exit_status(answer.answer))
