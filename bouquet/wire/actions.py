"""The ``query`` actions bouquet's server sends every node before training (its own protocol)."""

from __future__ import annotations

#: Config key of a ``query`` message naming what the server asks.
ACTION_KEY = "action"
#: ``query`` action every ClientApp answers with its partition id and data size.
HELLO_ACTION = "bouquet.hello"
#: ``query`` action asking a node for the task's initial model (servers without torch).
INIT_ACTION = "bouquet.initial-arrays"
