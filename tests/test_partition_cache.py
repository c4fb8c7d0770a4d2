"""A node's partition on its own disk (issue 17, target 3): same rows, keyed, never trusted."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from torch import nn

from bouquet.clients import base as client_base
from bouquet.clients.base import ClientEnv
from bouquet.clients.node_folder import partition_cache_folder
from bouquet.schema import CommonConfig
from bouquet.tasks.classification import Arrays, ClassificationTask
from bouquet.tasks.digits import DigitsMLP
from bouquet.tasks.partition_cache import (
    PartitionCache,
    cached_count,
    load_partition,
    partition_key,
    partition_size,
)
from bouquet.wire.actions import ACTION_KEY, HELLO_ACTION


class FileTask(ClassificationTask):
    """A small classification task read from one ``.npz`` file; counts its dataset loads."""

    name = "file-task"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.loads = 0

    def data_sources(self) -> list[Path] | None:
        return [self.path]

    def load_arrays(self) -> Arrays:
        self.loads += 1
        with np.load(self.path) as f:
            return Arrays(f["x"], f["y"], f["xt"], f["yt"])

    def build_model(self) -> nn.Module:
        return nn.Linear(4, 3)


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path / "data.npz"
    np.savez(path, x=rng.normal(size=(90, 4)).astype(np.float32), y=rng.integers(0, 3, 90),
             xt=rng.normal(size=(30, 4)).astype(np.float32), yt=rng.integers(0, 3, 30))
    return path


def common(**keys: object) -> CommonConfig:
    return dataclasses.replace(CommonConfig(), **keys)  # type: ignore[arg-type]


def same(a: object, b: object) -> bool:
    return all(torch.equal(getattr(a, f), getattr(b, f))
               and getattr(a, f).dtype == getattr(b, f).dtype
               for f in ("x_train", "y_train", "x_test", "y_test"))


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
def test_rows_from_the_cache_equal_a_fresh_load(tmp_path: Path, scheme: str) -> None:
    cfg = common(partition=scheme, seed=3)
    cache = PartitionCache(tmp_path / "cache")
    first = DigitsMLP()
    built = load_partition(first, 1, 3, cfg, cache)  # a miss: built from the dataset and stored
    fresh = DigitsMLP().partition(1, 3, cfg)
    key = partition_key(DigitsMLP(), 1, 3, cfg)
    assert key is not None
    cached = cache.load(key)
    assert cached is not None and same(cached, fresh) and same(built, fresh)
    cached.x_train[0] += 1.0  # copy-on-write mapping: a process's edit never reaches the file
    again = cache.load(key)
    assert again is not None and same(again, fresh)


def test_a_cached_partition_skips_the_dataset_load(tmp_path: Path, data_file: Path) -> None:
    cache, cfg = PartitionCache(tmp_path / "cache"), common(seed=1)
    load_partition(FileTask(data_file), 0, 2, cfg, cache)
    fresh_process = FileTask(data_file)
    got = load_partition(fresh_process, 0, 2, cfg, cache)
    assert fresh_process.loads == 0
    assert same(got, FileTask(data_file).partition(0, 2, cfg))


@pytest.mark.parametrize("change", [
    {"seed": 2}, {"partition": "dirichlet"}, {"dirichlet_alpha": 0.1},
    {"classes_per_client": 3}, {"partition_id": 1}, {"num_partitions": 3}, {"data": "touched"},
])
def test_a_changed_key_misses(tmp_path: Path, data_file: Path, change: dict[str, object]) -> None:
    cache = PartitionCache(tmp_path / "cache")
    base = {"seed": 1, "partition": "iid", "dirichlet_alpha": 0.5, "classes_per_client": 2}
    load_partition(FileTask(data_file), 0, 2, common(**base), cache)
    keys = dict(base)
    pid, n = change.get("partition_id", 0), change.get("num_partitions", 2)
    keys.update({k: v for k, v in change.items() if k in base})
    if "data" in change:  # the data file changed: another fingerprint
        st = data_file.stat()
        os.utime(data_file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    task = FileTask(data_file)
    key = partition_key(task, int(pid), int(n), common(**keys))  # type: ignore[call-overload]
    assert key is not None and cache.load(key) is None and cache.count(key) is None
    load_partition(task, int(pid), int(n), common(**keys), cache)  # type: ignore[call-overload]
    assert task.loads == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "meta", "missing"])
def test_a_damaged_entry_is_ignored_and_rebuilt(tmp_path: Path, data_file: Path,
                                                damage: str) -> None:
    cache, cfg = PartitionCache(tmp_path / "cache"), common(seed=1)
    load_partition(FileTask(data_file), 0, 2, cfg, cache)
    key = partition_key(FileTask(data_file), 0, 2, cfg)
    assert key is not None
    entry = cache.entry(key)
    target = entry / "x_train.npy"
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:-17])
    elif damage == "flip":  # same size, other bytes: only the digest sees it
        raw = bytearray(target.read_bytes())
        raw[-5] ^= 0xFF
        target.write_bytes(bytes(raw))
    elif damage == "meta":
        (entry / "meta.json").write_text("{not json")
    else:
        (entry / "y_test.npy").unlink()
    assert cache.load(key) is None
    if damage != "flip":
        assert cache.count(key) is None
    task = FileTask(data_file)
    got = load_partition(task, 0, 2, cfg, cache)
    assert task.loads == 1  # rebuilt from the dataset
    assert same(got, FileTask(data_file).partition(0, 2, cfg))
    again = cache.load(key)  # and the entry is whole again
    assert again is not None and same(again, got)


def test_an_empty_test_share_is_cached(tmp_path: Path, data_file: Path) -> None:
    """More partitions than test rows: some nodes hold no test row (0-row arrays)."""
    cache, cfg = PartitionCache(tmp_path / "cache"), common()
    built = load_partition(FileTask(data_file), 35, 40, cfg, cache)
    assert built.y_test.shape[0] == 0
    key = partition_key(FileTask(data_file), 35, 40, cfg)
    assert key is not None and cache.count(key) == built.num_train
    cached = cache.load(key)
    assert cached is not None and same(cached, built)


def test_a_task_without_data_sources_is_not_cached(tmp_path: Path, data_file: Path) -> None:
    class Unlisted(FileTask):
        def data_sources(self) -> list[Path] | None:
            return None

    cache = PartitionCache(tmp_path / "cache")
    assert partition_key(Unlisted(data_file), 0, 2, common()) is None
    load_partition(Unlisted(data_file), 0, 2, common(), cache)
    assert not (tmp_path / "cache").exists()


def test_the_folder_follows_the_node_config(tmp_path: Path) -> None:
    def ctx(node_config: dict[str, object]) -> Context:
        return Context(1, 1, node_config, RecordDict(), {})  # type: ignore[arg-type]

    assert partition_cache_folder(ctx({"partition-id": 0})) is None  # simulation: unchanged
    assert partition_cache_folder(ctx({"state-dir": str(tmp_path)})) == \
        tmp_path.resolve() / "partition-cache"
    assert partition_cache_folder(ctx({"state-dir": str(tmp_path),
                                       "partition-cache": "off"})) is None
    assert partition_cache_folder(ctx({"partition-cache": str(tmp_path / "c")})) == \
        (tmp_path / "c").resolve()


def test_a_hello_reads_the_count_without_loading_the_dataset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the ClientApp: the second process's hello answers from the cache's meta."""
    from bouquet.apps import client_app

    loads: list[int] = []
    original = DigitsMLP.load_arrays

    def counted(self: DigitsMLP) -> Arrays:
        loads.append(1)
        return original(self)

    monkeypatch.setattr(DigitsMLP, "load_arrays", counted)
    run_config = {"method": "fedavg", "task": "digits-mlp", "results-dir": str(tmp_path),
                  "run-name": "r", "partition": "dirichlet", "seed": 4}
    node_config = {"partition-id": 2, "num-partitions": 3, "state-dir": str(tmp_path / "state")}

    def hello_in_a_fresh_process() -> int:
        client_app._task.cache_clear()  # what a fresh flwr-clientapp process starts with
        monkeypatch.setattr(client_base, "_DATA_CACHE", {})
        ctx = Context(1, 7, node_config, RecordDict(), run_config)  # type: ignore[arg-type]
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 7, 1
        msg = Message(RecordDict({"config": ConfigRecord({ACTION_KEY: HELLO_ACTION,
                                                          "method": "fedavg"})}),
                      dst_node_id=7, message_type="query")
        reply = client_app.query(msg, ctx)
        return int(reply.content["info"]["num-examples"])  # type: ignore[index]

    expected = DigitsMLP().partition(2, 3, common(partition="dirichlet", seed=4)).num_train
    loads.clear()
    assert hello_in_a_fresh_process() == expected and len(loads) == 1  # cold: loads, stores
    assert hello_in_a_fresh_process() == expected and len(loads) == 1  # warm: no load

    def no_task(name: str) -> None:
        raise AssertionError("a warm hello loaded the task")

    with monkeypatch.context() as m:  # warm: not even the task (its module imports torch)
        m.setattr(client_app, "_task", no_task)
        ctx = Context(1, 7, node_config, RecordDict(), run_config)  # type: ignore[arg-type]
        msg = Message(RecordDict({"config": ConfigRecord({ACTION_KEY: HELLO_ACTION,
                                                          "method": "fedavg"})}),
                      dst_node_id=7, message_type="query")
        assert int(client_app.query(msg, ctx).content["info"]["num-examples"]) == expected  # type: ignore[index]
    client_app._task.cache_clear()


def test_the_hello_index_is_checked_again(tmp_path: Path, data_file: Path) -> None:
    """The torch-free count holds only while the recorded fingerprint inputs do."""
    cache, cfg = PartitionCache(tmp_path / "cache"), common(seed=1)
    built = load_partition(FileTask(data_file), 0, 2, cfg, cache)
    name = f"{FileTask.__module__}.{FileTask.__qualname__}"
    assert cached_count(cache.folder, "file-task", name, 0, 2, cfg) == built.num_train
    assert cached_count(cache.folder, "file-task", "other.Class", 0, 2, cfg) is None
    assert cached_count(cache.folder, "file-task", name, 1, 2, cfg) is None
    st = data_file.stat()
    os.utime(data_file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the data changed
    assert cached_count(cache.folder, "file-task", name, 0, 2, cfg) is None
    os.utime(data_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cached_count(cache.folder, "file-task", name, 0, 2, cfg) == built.num_train
    key = partition_key(FileTask(data_file), 0, 2, cfg)
    assert key is not None
    (cache.entry(key) / "y_train.npy").write_bytes(b"")  # the entry itself is checked too
    assert cached_count(cache.folder, "file-task", name, 0, 2, cfg) is None
    index = next((cache.folder / "hello").glob("*.json"))
    index.write_text("{")
    assert cached_count(cache.folder, "file-task", name, 0, 2, cfg) is None


def test_env_counts_without_a_cache_as_before(data_file: Path) -> None:
    task = FileTask(data_file)
    env = ClientEnv(common(), {}, task, 1, 2)
    assert env.num_examples() == task.partition(1, 2, common()).num_train
    assert partition_size(task, 1, 2, common(), PartitionCache(data_file.parent / "none")) is None


class EnvFileTask(FileTask):
    """A :class:`FileTask` whose file is chosen by an environment variable (as Fashion-MNIST's)."""

    name = "env-file-task"
    data_environment = ("BOUQUET_TEST_DATA_FILE",)

    def __init__(self) -> None:
        super().__init__(Path(os.environ["BOUQUET_TEST_DATA_FILE"]))


def test_a_hello_misses_when_an_environment_variable_chooses_other_data(
        tmp_path: Path, data_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same state-dir, the variable pointing at a file of another size: no stale count."""
    rng = np.random.default_rng(1)
    other = tmp_path / "other.npz"
    np.savez(other, x=rng.normal(size=(40, 4)).astype(np.float32), y=rng.integers(0, 3, 40),
             xt=rng.normal(size=(10, 4)).astype(np.float32), yt=rng.integers(0, 3, 10))
    cache, cfg = PartitionCache(tmp_path / "cache"), common(seed=1)
    name = f"{EnvFileTask.__module__}.{EnvFileTask.__qualname__}"
    monkeypatch.setenv("BOUQUET_TEST_DATA_FILE", str(data_file))
    first = load_partition(EnvFileTask(), 0, 2, cfg, cache)
    assert cached_count(cache.folder, "env-file-task", name, 0, 2, cfg) == first.num_train
    monkeypatch.setenv("BOUQUET_TEST_DATA_FILE", str(other))
    assert cached_count(cache.folder, "env-file-task", name, 0, 2, cfg) is None
    second = load_partition(EnvFileTask(), 0, 2, cfg, cache)
    assert second.num_train != first.num_train
    assert cached_count(cache.folder, "env-file-task", name, 0, 2, cfg) == second.num_train
    monkeypatch.delenv("BOUQUET_TEST_DATA_FILE")
    assert cached_count(cache.folder, "env-file-task", name, 0, 2, cfg) is None


PLUGIN_SOURCE = '''
import numpy as np

from bouquet.tasks.classification import Arrays, ClassificationTask


class PluginTask(ClassificationTask):
    name = "plugin-task"
    scale = {scale}

    def __init__(self, path):
        self.path = path

    def data_sources(self):
        return [self.path]

    def load_arrays(self):
        with np.load(self.path) as f:
            return Arrays(f["x"] * self.scale, f["y"], f["xt"], f["yt"])
'''


def test_the_fingerprint_hashes_a_plugin_task_s_own_module(
        tmp_path: Path, data_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task outside bouquet: its own module is keyed (a test module's class too)."""
    import importlib
    import sys

    from bouquet.tasks.fingerprint import inputs_hold

    package = tmp_path / "plugin_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(PLUGIN_SOURCE.format(scale=1.0))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "plugin_pkg.tasks", raising=False)
    module = importlib.import_module("plugin_pkg.tasks")
    inputs = module.PluginTask(data_file).data_fingerprint_inputs()
    assert "plugin_pkg.tasks" in inputs["modules"]
    assert FileTask.__module__ in FileTask(data_file).data_fingerprint_inputs()["modules"]
    assert inputs_hold(inputs)
    (package / "tasks.py").write_text(PLUGIN_SOURCE.format(scale=2.0))  # the plugin changed
    assert not inputs_hold(inputs)
    assert module.PluginTask(data_file).data_fingerprint_inputs() != inputs


def test_a_changed_task_attribute_misses(tmp_path: Path, data_file: Path) -> None:
    """An attribute set on the object (not in any source file) is keyed by its repr."""
    cache, cfg = PartitionCache(tmp_path / "cache"), common(seed=1)
    task = FileTask(data_file)
    load_partition(task, 0, 2, cfg, cache)
    changed = FileTask(data_file)
    changed.max_length = 12  # type: ignore[attr-defined]
    assert partition_key(changed, 0, 2, cfg) != partition_key(task, 0, 2, cfg)
    assert partition_size(changed, 0, 2, cfg, cache) is None
    assert partition_size(FileTask(data_file), 0, 2, cfg, cache) is not None


def _age(path: Path, seconds: float) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def test_a_store_prunes_the_partition_s_other_entries_and_dead_writers_files(
        tmp_path: Path, data_file: Path) -> None:
    """One entry per partition: an older fingerprint's entry and stale temporaries go."""
    from bouquet.tasks.partition_cache import STALE_TMP_S

    cache, cfg = PartitionCache(tmp_path / "cache"), common(seed=1)
    old_task = FileTask(data_file)
    old_task.max_length = 1  # type: ignore[attr-defined]  # another fingerprint, same partition
    load_partition(old_task, 0, 2, cfg, cache)
    load_partition(FileTask(data_file), 1, 2, cfg, cache)  # another partition: kept
    old_key, other_key = partition_key(old_task, 0, 2, cfg), partition_key(FileTask(data_file), 1, 2, cfg)
    assert old_key is not None and other_key is not None
    stale, fresh = cache.folder / "ab.tmp-dead", cache.folder / "cd.tmp-live"
    stale.mkdir(), fresh.mkdir()
    _age(stale, STALE_TMP_S + 10)
    hello_stale, hello_fresh = cache.folder / "hello" / "x.json.tmp", cache.folder / "hello" / "y.json.tmp"
    hello_stale.write_text("{"), hello_fresh.write_text("{")
    _age(hello_stale, STALE_TMP_S + 10)
    load_partition(FileTask(data_file), 0, 2, cfg, cache)
    new_key = partition_key(FileTask(data_file), 0, 2, cfg)
    assert new_key is not None and new_key != old_key
    entries = {p.name for p in cache.folder.iterdir() if p.is_dir()}
    assert entries == {new_key.digest(), other_key.digest(), "hello", fresh.name}
    assert {p.name for p in (cache.folder / "hello").iterdir()} >= {hello_fresh.name}
    assert not hello_stale.exists()
    assert cache.count(new_key) is not None and cache.count(other_key) is not None


def test_a_store_keeps_an_intact_entry_in_place(tmp_path: Path, data_file: Path) -> None:
    """A second writer of the same partition discards its copy; a damaged entry is replaced."""
    cache, cfg = PartitionCache(tmp_path / "cache"), common(seed=1)
    task = FileTask(data_file)
    local = load_partition(task, 0, 2, cfg, cache)
    key = partition_key(task, 0, 2, cfg)
    assert key is not None
    marker = cache.entry(key) / "marker"
    marker.write_text("the first writer's entry")
    cache.store(key, local)
    assert marker.exists()  # kept, not moved aside and rewritten
    assert not [p for p in cache.folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    data = bytearray((cache.entry(key) / "x_train.npy").read_bytes())
    data[-1] ^= 0xFF
    (cache.entry(key) / "x_train.npy").write_bytes(bytes(data))
    cache.store(key, local)
    assert not marker.exists() and cache.load(key) is not None


def test_a_count_needs_the_rows_in_the_file_not_only_in_the_meta(
        tmp_path: Path, data_file: Path) -> None:
    """A meta.json naming more rows than its .npy files hold is not counted."""
    import json

    cache, cfg = PartitionCache(tmp_path / "cache"), common(seed=1)
    task = FileTask(data_file)
    local = load_partition(task, 0, 2, cfg, cache)
    key = partition_key(task, 0, 2, cfg)
    assert key is not None and cache.count(key) == local.num_train
    meta_path = cache.entry(key) / "meta.json"
    meta = json.loads(meta_path.read_text())
    for name in ("x_train", "y_train"):
        meta["arrays"][name]["shape"][0] += 5  # sizes and digests left as they are
    meta_path.write_text(json.dumps(meta))
    assert cache.count(key) is None


def test_env_counts_a_miss_with_the_task_s_own_count(
        tmp_path: Path, data_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cache miss the hello's count is ``task.num_examples``, and the rows are stored."""
    monkeypatch.setattr(client_base, "_DATA_CACHE", {})  # a fresh process

    class CountingTask(FileTask):
        def num_examples(self, partition_id: int, num_partitions: int,
                         common: CommonConfig) -> int:
            return 7

    task = CountingTask(data_file)
    env = ClientEnv(common(), {}, task, 0, 2, partition_cache=tmp_path / "cache")
    assert env.num_examples() == 7
    assert partition_size(task, 0, 2, common(), PartitionCache(tmp_path / "cache")) is not None
