"""``digits-mlp``: scikit-learn's bundled digits (Alpaydin & Kaynak, UCI) with a 2-layer MLP.

No download and no extra package: the 1,797 8x8 images ship inside scikit-learn. A fixed,
stratified 80/20 split (a fifth of each class, rounded down, for testing) gives 1,442 training
and 355 test images.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from bouquet.tasks.classification import Arrays, ClassificationTask
from bouquet.tasks.resources import SCIKIT_LEARN_DIGITS

#: The digits file inside the scikit-learn package (what ``load_digits`` reads).
DIGITS_FILE = "datasets/data/digits.csv.gz"


def read_digits(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Pixels (float64, 0-16) and labels (int64) of scikit-learn's ``digits.csv.gz``.

    The file holds one row per image, 64 pixel values and then the label, as
    ``sklearn.datasets.load_digits(return_X_y=True)`` reads it.
    """
    rows = np.loadtxt(path, delimiter=",")
    return rows[:, :-1], rows[:, -1].astype(np.int64)


class DigitsMLP(ClassificationTask):
    """64 -> 64 -> 10 MLP on pixel intensities scaled to [0, 1]."""

    name = "digits-mlp"
    num_classes = 10
    hidden = 64
    data_packages = (*ClassificationTask.data_packages, "scikit-learn")

    def data_sources(self) -> list[Path] | None:
        """scikit-learn's ``datasets/data/digits.csv.gz`` (found without importing scikit-learn)."""
        try:
            return [SCIKIT_LEARN_DIGITS.folder(self.name) / DIGITS_FILE]
        except ImportError:
            return None

    def load_arrays(self) -> Arrays:
        """Load and split the bundled digits (the split is fixed, independent of the run seed).

        The file scikit-learn ships is read directly, as ``sklearn.datasets.load_digits`` reads
        it (one row per image: 64 pixels, then the label; tests/test_foundation.py checks the
        two agree): importing scikit-learn costs about 2 CPU s per process (scipy and the
        rest), paid by every server and every node process that loads the task. Without
        scikit-learn (or the file) it raises :class:`ImportError` with the install command.
        """
        x, y = read_digits(SCIKIT_LEARN_DIGITS.file(self.name, DIGITS_FILE))
        x = (x / 16.0).astype(np.float32)
        rng = np.random.default_rng(1234)
        test = np.zeros(len(y), dtype=bool)
        for c in range(10):
            idx = np.flatnonzero(y == c)
            test[rng.choice(idx, size=len(idx) // 5, replace=False)] = True
        return Arrays(x[~test], y[~test], x[test], y[test])

    def build_model(self) -> nn.Module:
        """A fresh MLP."""
        return nn.Sequential(nn.Linear(64, self.hidden), nn.ReLU(), nn.Linear(self.hidden, 10))
