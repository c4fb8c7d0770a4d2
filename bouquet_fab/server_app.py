"""The installed flwr-bouquet's ServerApp, if it is the version this FAB was built for."""

from bouquet.apps.fab import require_fab_version

require_fab_version(__file__)

from bouquet.apps.server_app import app  # noqa: E402

__all__ = ["app"]
