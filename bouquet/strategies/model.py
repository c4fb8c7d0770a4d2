"""A strategy base for methods whose server holds a global model as named numpy arrays."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from bouquet.strategies.base import BouquetStrategy
from bouquet.wire import validation as v

#: re-exported: ``bouquet.strategies.model.to_record`` is how plugin users encode a model
from bouquet.wire.arrays import to_numpy, to_record

__all__ = ["ModelStrategy", "to_numpy", "to_record"]


class ModelStrategy(BouquetStrategy):
    """Keeps ``self.weights`` (the global model) and checks replies against its shapes.

    The initial model is the ``initial_arrays`` argument or, when that is None, the ``arrays``
    Flower passes to the first ``configure_train`` (``start(initial_arrays=...)``).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.weights: dict[str, np.ndarray] = {}
        if self.setup.initial_arrays is not None:
            self.bind_model(self.setup.initial_arrays)

    def needs_model(self) -> bool:
        """True until the initial model is known."""
        return not self.weights

    def bind_model(self, arrays: ArrayRecord) -> None:
        """Take the initial model; subclasses derive their model-shaped state in :meth:`on_model`."""
        self.weights = to_numpy(arrays)
        if not self.weights:
            raise ValueError(f"{type(self).__name__} needs a non-empty initial model")
        self.on_model()

    def on_model(self) -> None:
        """Set up what depends on the model's layout (called once, when the model is bound)."""

    def global_arrays(self) -> ArrayRecord | None:
        """The global model as an ArrayRecord (None before the model is known)."""
        return to_record(self.weights) if self.weights else None

    def spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Expected name -> (shape, dtype) of a full model."""
        return {k: (a.shape, a.dtype) for k, a in self.weights.items()}

    def model_message(self, rnd: int) -> RecordDict:
        """The usual downlink: global arrays plus a fresh config."""
        return RecordDict({"arrays": to_record(self.weights), "config": self.base_config(rnd)})

    def validate_model_reply(self, content: RecordDict) -> tuple[dict[str, np.ndarray], int]:
        """Check a full-model reply; return its arrays and its ``num-examples`` weight."""
        arrays = v.arrays(content, "arrays", self.spec())
        return arrays, v.num_examples(content)

    def model_update_norm(self, arrays: Mapping[str, np.ndarray]) -> float:
        """L2 distance of a reply's model from the global one (what it would move it by)."""
        return v.update_norm(arrays, self.weights)

    def state_dict(self) -> dict[str, Any]:
        """Base state plus the global model."""
        return {**super().state_dict(), "weights": dict(self.weights)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore base state and the global model."""
        super().load_state_dict(state)
        self.weights = {k: np.asarray(a) for k, a in state["weights"].items()}
