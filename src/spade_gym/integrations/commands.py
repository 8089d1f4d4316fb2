"""`spade serve`: the command of the OpenEnv integration, added to :data:`spade_gym.cli_common.app` through
the entry point group ``spade_gym.commands`` (pyproject.toml), so the core never imports an
integration; openenv-core is imported when the command runs."""

from __future__ import annotations

from typing import Annotated

import typer

from spade_gym.cli_common import RegistryOption, app, fail, safe, say
from spade_gym.errors import SpadeError


@app.command()
def serve(
    env_ids: Annotated[
        list[str] | None, typer.Argument(help="Gymnasium ids to serve (default: spade/Generated-v0, a draw per reset).")
    ] = None,
    registry: RegistryOption = None,
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 accepts other machines.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    max_sessions: Annotated[int, typer.Option(help="WebSocket sessions at once.", min=1)] = 8,
    max_turns: Annotated[int | None, typer.Option(help="Cap on agent turns per episode.", min=1)] = None,
) -> None:
    """Serve environments as an OpenEnv environment: one episode per WebSocket session at ws://HOST:PORT/ws.

    Connect with OpenEnv's client, `spade_gym.integrations.openenv.SpadeEnvClient` (docs/serving.md).
    """
    try:
        from spade_gym.integrations import openenv
    except ImportError as exc:  # MissingDependency: one line naming the extra
        fail(safe(str(exc)), 2)
    ids = env_ids or [openenv.GENERATED_ID]
    try:
        app_ = openenv.create_app(ids, registry=registry, max_turns=max_turns, max_sessions=max_sessions)
    except (SpadeError, ValueError) as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 2)
    say(f"serving {', '.join(ids)} as an OpenEnv environment at ws://{host}:{port}/ws (Ctrl-C stops)")
    openenv.serve(app_, host=host, port=port)
