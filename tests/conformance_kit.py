"""Helpers for the conformance suite: building a method on the in-process grid, corrupting replies,
comparing states."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.registry import get_method
from bouquet.apps.runner import build_strategy, initial_arrays, load_server_task
from bouquet.strategies.base import BouquetStrategy

NUM_NODES = 4


def method_config(name: str, tmp_path: Path, **over: Any) -> dict[str, Any]:
    m = get_method(name)
    cfg: dict[str, Any] = {
        "method": name,
        "task": m.test_task or m.default_task,
        "num-server-rounds": 2,
        "results-dir": str(tmp_path),
        "run-name": "run",
        "sample-deadline": 5.0,
        "round-timeout": 60.0,
        "seed": 3,
        "plots": False,  # drawn in tests of the results files, not in every conformance run
    }
    cfg.update(m.test_config)
    cfg.update(over)
    return cfg


def build(name: str, tmp_path: Path, grid: LocalGrid | None = None, **over: Any
          ) -> tuple[LocalGrid, BouquetStrategy]:
    g = grid or LocalGrid(NUM_NODES, method_config(name, tmp_path, **over))
    cfg = resolve(g.run_config)
    task = load_server_task(cfg)
    return g, build_strategy(cfg, initial_arrays(cfg, task, g))


# --------------------------------------------------------------------------- corruptions
def _first_array(content: RecordDict) -> tuple[str, str] | None:
    for rname, rec in content.items():
        if isinstance(rec, ArrayRecord):
            for key in rec.keys():
                return rname, key
    return None


def _first_float_array(content: RecordDict) -> tuple[str, str] | None:
    for rname, rec in content.items():
        if isinstance(rec, ArrayRecord):
            for key in rec.keys():
                if np.issubdtype(rec[key].numpy().dtype, np.floating) and rec[key].numpy().size:
                    return rname, key
    return None


def _replace(content: RecordDict, rname: str, key: str, arr: np.ndarray) -> RecordDict:
    out = RecordDict()
    for name, rec in content.items():
        if name == rname:
            rec = ArrayRecord({k: (Array(arr) if k == key else rec[k]) for k in rec.keys()})
        out[name] = rec
    return out


def remove_record(content: RecordDict) -> RecordDict:
    loc = _first_array(content)
    victim = loc[0] if loc else next(iter(content.keys()))
    return RecordDict({k: v for k, v in content.items() if k != victim})


def wrong_shape(content: RecordDict) -> RecordDict:
    loc = _first_array(content)
    assert loc, "reply has no arrays"
    arr = content[loc[0]][loc[1]].numpy()  # type: ignore[index]
    bad = arr.reshape(-1) if arr.ndim > 1 else np.concatenate([arr.reshape(-1), arr.reshape(-1)[:1]])
    if bad.shape == arr.shape:  # a 1-element vector
        bad = np.zeros(arr.size + 1, dtype=arr.dtype)
    return _replace(content, loc[0], loc[1], bad)


def wrong_dtype(content: RecordDict) -> RecordDict:
    loc = _first_array(content)
    assert loc, "reply has no arrays"
    arr = content[loc[0]][loc[1]].numpy()  # type: ignore[index]
    target = np.float64 if arr.dtype != np.float64 else np.float32
    return _replace(content, loc[0], loc[1], arr.astype(target))


def inject_nan(content: RecordDict) -> RecordDict:
    loc = _first_float_array(content)
    assert loc, "reply has no float arrays"
    arr = content[loc[0]][loc[1]].numpy().copy()  # type: ignore[index]
    arr.reshape(-1)[0] = np.nan
    return _replace(content, loc[0], loc[1], arr)


CORRUPTIONS: dict[str, Callable[[RecordDict], RecordDict]] = {
    "missing-record": remove_record,
    "wrong-shape": wrong_shape,
    "wrong-dtype": wrong_dtype,
    "nan": inject_nan,
}


# --------------------------------------------------------------------------- state comparison
def assert_same_state(a: Any, b: Any, path: str = "") -> None:
    if isinstance(a, Mapping):
        assert isinstance(b, Mapping), f"{path}: mapping vs {type(b).__name__}"
        assert set(map(str, a)) == set(map(str, b)), f"{path}: keys differ"
        bm = {str(k): v for k, v in b.items()}
        for k, v in a.items():
            assert_same_state(v, bm[str(k)], f"{path}/{k}")
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a_, b_ = np.asarray(a), np.asarray(b)
        assert a_.shape == b_.shape, f"{path}: shape {a_.shape} != {b_.shape}"
        nan_ok = np.issubdtype(a_.dtype, np.floating)
        assert np.array_equal(a_, b_, equal_nan=nan_ok), f"{path}: arrays differ"
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{path}/{i}")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"
