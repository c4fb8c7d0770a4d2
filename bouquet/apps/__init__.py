"""Wiring: the ServerApp and ClientApp, the method registry, config, results and the CLI."""
