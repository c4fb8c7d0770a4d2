"""flwr-bouquet: federated-learning methods as Flower plugins.

The package is split so that a server needs no deep-learning framework:
``bouquet.strategies``, ``bouquet.compression`` and the numpy parts of
``bouquet.privacy`` import only numpy/scipy/flwr. Node-side code lives in
``bouquet.clients`` and ``bouquet.tasks``; ``bouquet.apps`` wires them together.
"""

__version__ = "0.1.0"
