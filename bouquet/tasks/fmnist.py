"""``fmnist-cnn``: Fashion-MNIST (Xiao, Rasul & Vollgraf, 2017) with a small CNN.

Data come from Debian's ``dataset-fashion-mnist`` package (``/usr/share/datasets/fashion-mnist``,
or the folder in ``$BOUQUET_FMNIST_DIR``); where it is missing and the user has the Hugging Face
hub, from ``zalando-datasets/fashion_mnist``. With neither, the error names both ways.
"""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np
from torch import nn

from bouquet.tasks.classification import Arrays, ClassificationTask

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
HUB_ID = "zalando-datasets/fashion_mnist"


def _idx(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes())
    magic = struct.unpack(">I", raw[:4])[0]
    if magic == 2051:
        n, rows, cols = struct.unpack(">III", raw[4:16])
        return np.frombuffer(raw, np.uint8, offset=16).reshape(n, rows, cols)
    if magic == 2049:
        return np.frombuffer(raw, np.uint8, offset=8)
    raise ValueError(f"{path}: not an IDX file (magic {magic})")


IDX_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def idx_folder() -> Path:
    """Where the IDX files are looked for (``$BOUQUET_FMNIST_DIR`` or Debian's folder)."""
    return Path(os.environ.get("BOUQUET_FMNIST_DIR", DEBIAN_DIR))


def load_fashion_mnist() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return uint8 images (N, 28, 28) and labels for train and test."""
    folder = idx_folder()
    names = IDX_FILES
    if all((folder / n).is_file() for n in names):
        xtr, ytr, xte, yte = (_idx(folder / n) for n in names)
        return xtr, ytr, xte, yte
    try:
        from datasets import load_dataset

        ds = load_dataset(HUB_ID)
        xtr = np.stack([np.asarray(im) for im in ds["train"]["image"]])
        xte = np.stack([np.asarray(im) for im in ds["test"]["image"]])
        return xtr, np.asarray(ds["train"]["label"]), xte, np.asarray(ds["test"]["label"])
    except Exception as exc:
        raise FileNotFoundError(
            f"Fashion-MNIST not found in {folder}. Install it with "
            "'apt-get install dataset-fashion-mnist' (or point BOUQUET_FMNIST_DIR at the IDX "
            f"files), or allow the Hugging Face hub to fetch {HUB_ID!r} (unset HF_HUB_OFFLINE). "
            f"Hub attempt failed with: {type(exc).__name__}: {str(exc)[:200]}"
        ) from exc


class FashionCNN(ClassificationTask):
    """Two 5x5 conv layers (16, 32 channels) with max-pooling and a linear head."""

    name = "fmnist-cnn"
    num_classes = 10
    data_environment: tuple[str, ...] = ("BOUQUET_FMNIST_DIR",)

    def data_sources(self) -> list[Path] | None:
        """The four IDX files; None when they are absent (the hub path is not cached on disk)."""
        folder = idx_folder()
        files = [folder / n for n in IDX_FILES]
        return files if all(f.is_file() for f in files) else None

    def load_arrays(self) -> Arrays:
        """Images scaled to [0, 1] with a channel axis."""
        xtr, ytr, xte, yte = load_fashion_mnist()
        def prep(x: np.ndarray) -> np.ndarray:
            return (x.astype(np.float32) / 255.0)[:, None, :, :]
        return Arrays(prep(xtr), ytr.astype(np.int64), prep(xte), yte.astype(np.int64))

    def build_model(self) -> nn.Module:
        """A fresh CNN (about 30k parameters)."""
        return nn.Sequential(
            nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
        )
