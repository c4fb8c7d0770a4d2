"""The node's own folder on disk, named by the SuperNode's node config ``state-dir``.

Both the node-state persistence of the ClientApp (:mod:`bouquet.apps.client_app`) and the
FedKSeed replica cache (:mod:`bouquet.clients.replica_store`) live under it.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context

#: Node-config key of the folder that holds this node's saved state.
STATE_DIR_KEY = "state-dir"
#: Values of ``state-dir`` that turn persistence off.
STATE_OFF = ("off", "none", "")


def node_folder(context: Context) -> Path | None:
    """The folder ``state-dir`` names, or None when it is not set or set to off."""
    setting = context.node_config.get(STATE_DIR_KEY)
    if setting is None or str(setting).strip().lower() in STATE_OFF:
        return None
    return Path(str(setting)).expanduser().resolve()
