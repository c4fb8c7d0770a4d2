"""The one ServerApp: resolves the config and runs the method named by ``method``."""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from bouquet.apps.config import ConfigError
from bouquet.apps.runner import execute, say

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured method; a config error stops the run before any node is contacted."""
    try:
        execute(grid, context.run_config)
    except ConfigError as exc:
        say(f"configuration error: {exc}")
        raise
