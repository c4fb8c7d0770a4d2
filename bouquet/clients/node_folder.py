"""The node's own folder on disk, named by the SuperNode's node config ``state-dir``.

The node-state persistence of the ClientApp (:mod:`bouquet.apps.client_app`), the FedKSeed
replica cache (:mod:`bouquet.clients.replica_store`) and, by default, the partition cache
(:mod:`bouquet.tasks.partition_cache`, node config ``partition-cache``) live under it.
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


#: Node-config key of the partition cache's folder (``off`` disables it).
PARTITION_CACHE_KEY = "partition-cache"
#: The partition cache's folder inside ``state-dir`` when ``partition-cache`` is not set.
PARTITION_CACHE_DIR = "partition-cache"


def partition_cache_folder(context: Context) -> Path | None:
    """Where this node keeps its partitions on disk, or None (the dataset is loaded per process).

    ``partition-cache=<folder>``; ``partition-cache=off`` disables it; unset, it is
    ``<state-dir>/partition-cache`` when ``state-dir`` is set, else None (simulation: no node
    config, so nothing changes there).
    """
    setting = context.node_config.get(PARTITION_CACHE_KEY)
    if setting is not None:
        if str(setting).strip().lower() in STATE_OFF:
            return None
        return Path(str(setting)).expanduser().resolve()
    state = node_folder(context)
    return None if state is None else state / PARTITION_CACHE_DIR
