"""Import directions (DESIGN §2): server-side code never needs torch & co."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import bouquet

ROOT = Path(bouquet.__file__).parent
HEAVY = ("torch", "transformers", "peft", "opacus", "sentence_transformers")
SERVER_PACKAGES = ("strategies", "compression", "wire")
#: privacy modules that run on servers too (numpy only)
SERVER_PRIVACY = ("tree", "shuffle", "gaussian", "ledger")

BLOCKER = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {HEAVY!r}:
            raise ImportError('blocked for the server-side import test: ' + name)
        return None
sys.meta_path.insert(0, Block())
"""


#: Every method's strategy class, as a Flower user imports it.
PLUGIN_CLASSES = ("FedAvg", "FedAvgCompressed", "FedEF", "Scaffold", "SingleUplink", "Scallion",
                  "Scafcom", "FedCG", "FedKSeed", "FedKSeedPro", "FedIT", "FFALoRA", "FedSB",
                  "FedLinUCB")


def server_modules() -> list[str]:
    mods = ["bouquet.apps.server_app", "bouquet.apps.cli", "bouquet.apps.fab"]
    for pkg in SERVER_PACKAGES:
        for info in pkgutil.iter_modules([str(ROOT / pkg)]):
            mods.append(f"bouquet.{pkg}.{info.name}")
    for name in SERVER_PRIVACY:
        if (ROOT / "privacy" / f"{name}.py").exists():
            mods.append(f"bouquet.privacy.{name}")
    return mods


def test_server_side_imports_without_torch() -> None:
    code = BLOCKER + "\nimport importlib\n" + "".join(
        f"importlib.import_module({m!r})\n" for m in server_modules()
    ) + f"from bouquet.strategies import {', '.join(PLUGIN_CLASSES)}\nprint('ok')\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_blocker_really_blocks() -> None:
    proc = subprocess.run([sys.executable, "-c", BLOCKER + "import torch"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "blocked" in proc.stderr


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in (ROOT / package).rglob("*.py"):
        for mod in _imports(path):
            if any(mod == f or mod.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    return bad


def test_strategies_never_import_clients_tasks_or_apps() -> None:
    assert _violations("strategies", ("bouquet.clients", "bouquet.tasks", "bouquet.apps")) == []
    assert _violations("compression", ("bouquet.clients", "bouquet.tasks", "bouquet.apps",
                                       "bouquet.strategies")) == []


def test_clients_never_import_apps_and_tasks_never_import_strategies() -> None:
    assert _violations("clients", ("bouquet.apps",)) == []
    assert _violations("tasks", ("bouquet.strategies", "bouquet.clients")) == []


def test_privacy_never_imports_clients_or_apps() -> None:
    """privacy/ sits below clients/ (the accountant uses bouquet.node_state, not clients.base)."""
    assert _violations("privacy", ("bouquet.clients", "bouquet.apps")) == []


def test_tasks_never_import_apps() -> None:
    """The task catalogue declares with the bottom-layer records, not apps' registry (issue 13)."""
    assert _violations("tasks", ("bouquet.apps",)) == []


def test_the_declaration_layer_imports_nothing_of_bouquet() -> None:
    """bouquet.registration sits under tasks/ and strategies/: it may import no bouquet module."""
    for name in ("registration.py", "schema.py"):
        assert {m for m in _imports(ROOT / name) if m.split(".")[0] == "bouquet"} == set(), name


def _imported_names(path: Path, package: str) -> set[tuple[str, str]]:
    """``(module, name)`` of every ``from <package>... import name`` in ``path``."""
    out: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module == package or node.module.startswith(package + ".")):
            out |= {(node.module, a.name) for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {(a.name, "*") for a in node.names if a.name.startswith(package)}
    return out


def test_the_wire_layer_imports_only_compression_and_schema() -> None:
    """bouquet.wire sits under strategies/ and clients/: record names and codecs both sides use."""
    allowed = ("bouquet.wire", "bouquet.compression", "bouquet.schema")
    bad = [f"{path.name} imports {mod}" for path in (ROOT / "wire").rglob("*.py")
           for mod in _imports(path)
           if mod.split(".")[0] == "bouquet" and not any(mod == a or mod.startswith(a + ".")
                                                         for a in allowed)]
    assert bad == []


#: What a client half may still take from bouquet.strategies, and why. Wire names and codecs come
#: from bouquet.wire; what is left is (a) the methods' settings sections, in
#: ``bouquet.strategies.sections`` (any name: they are dataclasses of keys, and SCAFFOLD's
#: control step derived from them), and (b) numpy math the node must compute exactly as the
#: server does (one definition, not a twin): LinUCB's protocol derivation (it needs the privacy
#: calibration of bouquet.privacy, which the wire layer may not import; its own module, never
#: the strategy's), the LoRA layout and merge (its own module too, never the strategy's), and
#: the checkpoint format both sides persist their state in.
SECTIONS = "bouquet.strategies.sections"
CLIENT_USES_OF_STRATEGIES = {
    "bouquet.strategies.lora_layout": {"Adapted", "adapted_modules", "head_names", "split_names",
                                       "lora_a_init", "merge", "lora_variant"},
    "bouquet.strategies.linucb_protocol": {"Protocol", "make_protocol", "announced_values",
                                           "confidence_radius", "env_section", "VARIANTS",
                                           "variant_named", "horizon_of"},
    "bouquet.strategies.checkpoint": {"META_FILE", "CheckpointError", "load_checkpoint",
                                      "atomic_write", "atomic_rewrite", "fsync_folder"},
}


def test_clients_take_only_configs_and_shared_math_from_strategies() -> None:
    """No wire name or codec reaches a client through bouquet.strategies (issue 13 §5)."""
    bad = []
    for path in (ROOT / "clients").rglob("*.py"):
        for module, name in _imported_names(path, "bouquet.strategies"):
            if module.startswith(SECTIONS + ".") or module == SECTIONS:
                continue
            if name not in CLIENT_USES_OF_STRATEGIES.get(module, set()):
                bad.append(f"{path.name}: from {module} import {name}")
    assert bad == []


#: Strategy modules that define a method's strategy (what ``bouquet.strategies`` re-exports); a
#: node that imports the ClientApp must load none of them, nor scipy (issue 17, target 3).
_LAZY_PROBE = r"""
import json, sys
import bouquet.apps.client_app
import bouquet.apps.registry as registry
after_import = sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'torch')
                      or m in {homes!r})
registry.get_method('fedavg')
registry.get_method('scafcom')
from bouquet.apps.config import full_run_config, resolve
resolve(full_run_config({{'method': 'scafcom'}}))
after_message = sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'torch'))
print(json.dumps([after_import, after_message]))
"""


def test_the_client_app_imports_no_strategy_module_and_no_scipy() -> None:
    """Importing the ClientApp (and resolving a scafcom run config) loads no scipy.

    ``bouquet.strategies`` loads its names on first use, and scipy is imported where a plan
    is solved (the Gaussian privacy profile needs none), so a ClientApp process per message
    (Flower's deployment) no longer pays about 2 s for modules its method never uses.
    """
    from bouquet import strategies

    homes = sorted({f"bouquet.strategies.{m}" for m in strategies._HOMES.values()})
    proc = subprocess.run([sys.executable, "-c", _LAZY_PROBE.format(homes=homes)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after_import, after_message = json.loads(proc.stdout.strip().splitlines()[-1])
    assert after_import == []
    assert after_message == []


#: One message of ``method`` in a fresh process, as a SuperNode with ``state-dir`` runs it:
#: resolve the run config, load the task and the client procedure, and (``rows``) the node's
#: partition through its partition cache. Prints the strategy modules and the data and model
#: libraries that were loaded.
_MESSAGE_PROBE = r"""
import json, sys
import bouquet.apps.client_app as ca
from bouquet.apps.config import full_run_config
from bouquet.clients.base import ClientEnv
method, task, cache, rows = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "rows"
cfg = ca._resolve(tuple(sorted(full_run_config({"method": method, "task": task}).items())))
resolved = sorted(m for m in sys.modules if m.startswith("bouquet.strategies."))
env = ClientEnv(cfg.common, cfg.sections, ca._task(cfg.task_name), 0, 3,
                partition_cache=__import__("pathlib").Path(cache))
ca._procedure(cfg.method.client)
if rows:
    env.local_data()
libraries = sorted({m.split(".")[0] for m in sys.modules} & {LIBRARIES})
print(json.dumps([resolved, sorted(m for m in sys.modules if m.startswith("bouquet.strategies.")),
                  libraries]))
"""
#: Libraries that only a dataset load or a split needs (never a message whose rows are cached).
DATA_LIBRARIES = ("sklearn", "datasets", "flwr_datasets", "pandas", "scipy")
#: What a message of a torch method may load from bouquet.strategies: the sections, and the
#: checkpoint format node-state persistence shares with the server.
MESSAGE_STRATEGY_MODULES = ("bouquet.strategies.sections", "bouquet.strategies.checkpoint")
#: A bandit message also loads the LinUCB protocol derivation, never the strategy module.
BANDIT_STRATEGY_MODULES = (*MESSAGE_STRATEGY_MODULES, "bouquet.strategies.linucb_protocol")


def _message_probe(method: str, task: str, cache: Path, rows: bool) -> list[list[str]]:
    code = _MESSAGE_PROBE.replace("{LIBRARIES}", repr(set(DATA_LIBRARIES) | {"transformers"}))
    proc = subprocess.run([sys.executable, "-c", code, method, task, str(cache),
                           "rows" if rows else "-"], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


#: Each probed method's task and the strategy modules its client may load.
MESSAGE_PROBES = {"fedavg": ("digits-mlp", MESSAGE_STRATEGY_MODULES),
                  "scafcom": ("digits-mlp", MESSAGE_STRATEGY_MODULES),
                  "fedkseed": ("digits-mlp", MESSAGE_STRATEGY_MODULES),
                  "fedlinucb": ("synth-bandit", BANDIT_STRATEGY_MODULES),
                  "dp-fedlinucb-ldp": ("synth-bandit", BANDIT_STRATEGY_MODULES)}


@pytest.mark.parametrize("method", sorted(MESSAGE_PROBES))
def test_a_message_imports_only_what_its_method_needs(method: str, tmp_path: Path) -> None:
    """Resolving a run config loads only the sections; a client no strategy module.

    The config dataclasses live in ``bouquet.strategies.sections`` (issue 17, target 3): before,
    a message's config resolution imported all the strategy modules for their config classes.
    A LinUCB silo takes its protocol from ``bouquet.strategies.linucb_protocol``, not from the
    server's ``bouquet.strategies.linucb`` (and, until a message calibrates noise, no scipy).
    """
    task, allowed = MESSAGE_PROBES[method]
    resolved, loaded, libraries = _message_probe(method, task, tmp_path, rows=False)
    assert all(m.startswith(MESSAGE_STRATEGY_MODULES) for m in resolved), resolved
    assert all(m.startswith(allowed) for m in loaded), loaded
    assert libraries == []  # the task modules import their data libraries lazily


#: One real round-1 training message of a method in a fresh process, as a SuperNode runs it:
#: ``sys.argv[2]`` holds the instruction's content (Flower's protobuf serialisation), written by
#: the test from the method's own strategy. Prints the strategy modules and the
#: libraries the message loaded, and the reply's record names.
_TRAIN_PROBE = r"""
import json, sys, uuid
from flwr.app import Context, Message, RecordDict
from flwr.common.serde import recorddict_from_proto
from flwr.proto.recorddict_pb2 import RecordDict as RecordDictProto
from flwr.supercore.task_identity import TaskIdentity
import bouquet.apps.client_app as ca
run_config = json.loads(sys.argv[1])
proto = RecordDictProto()
proto.ParseFromString(open(sys.argv[2], "rb").read())
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 100, 1
msg = Message(recorddict_from_proto(proto), dst_node_id=100, message_type="train")
msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
ctx = Context(1, 100, {"partition-id": 0, "num-partitions": 2, "dp-seed": 7}, RecordDict(),
              run_config)
reply = ca.train(msg, ctx)
print(json.dumps([sorted(m for m in sys.modules if m.startswith("bouquet.strategies.")),
                  sorted({m.split(".")[0] for m in sys.modules} & {"scipy", "torch", "sklearn"}),
                  [] if reply.has_error() else sorted(reply.content.keys())]))
"""


def _train_probe(keys: dict[str, object], content: object, tmp_path: Path) -> list[list[str]]:
    """Run :data:`_TRAIN_PROBE` on ``content`` (a round's instruction) in a fresh process."""
    from flwr.common.serde import recorddict_to_proto

    instruction = tmp_path / "instruction.pb"
    instruction.write_bytes(recorddict_to_proto(content).SerializeToString())  # type: ignore[arg-type]
    proc = subprocess.run([sys.executable, "-c", _TRAIN_PROBE, json.dumps(keys),
                           str(instruction)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("method", ["fedlinucb", "dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp",
                                    "dp-fedlinucb-sdp-vecsum"])
def test_a_bandit_training_message_loads_the_protocol_not_the_strategy(
        method: str, tmp_path: Path) -> None:
    """A silo's training message takes its protocol from ``linucb_protocol`` (issue 17, target 3).

    The probe above stops at the procedure load; this one runs the message itself, so a module
    outside ``bouquet/clients`` that pulled the server strategy in would be caught too. No
    variant loads scipy: the tree-mechanism and amplified-shuffle silos calibrate their noise
    with :mod:`bouquet.privacy.gaussian`, standard library only (before, scipy on every message).
    """
    from flwr.supercore.task_identity import TaskIdentity

    from bouquet.apps.config import resolve
    from bouquet.apps.runner import build_strategy

    keys = {"method": method, "task": "synth-bandit", "results-dir": str(tmp_path / "res"),
            "run-name": "r", "seed": 2, "linucb.num-silos": 2, "linucb.horizon-rounds": 4,
            "linucb.batch-steps": 5, "num-server-rounds": 4}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    strategy = build_strategy(resolve(keys), None)
    loaded, libraries, reply = _train_probe(keys, strategy.configure_round(1, [0])[0], tmp_path)
    assert reply, "the silo answered with an error: the probe did not run a training step"
    assert all(m.startswith(BANDIT_STRATEGY_MODULES) for m in loaded), loaded
    assert libraries == []


#: A LoRA message also loads the adapter layout it shares with the server, never the strategy.
LORA_STRATEGY_MODULES = (*MESSAGE_STRATEGY_MODULES, "bouquet.strategies.lora_layout")


@pytest.mark.parametrize("method, over", [("fedit", {}), ("ffa-lora", {"dp.enabled": True})],
                         ids=["fedit", "ffa-lora-dp"])
def test_a_lora_training_message_loads_the_layout_not_the_strategy(
        method: str, over: dict[str, object], tmp_path: Path) -> None:
    """A LoRA client's training message (plain, and with DP-SGD) loads no strategy module.

    Its adapter layout, FFA's seeded A and the merge come from ``lora_layout`` (issue 17), not
    from the server's ``bouquet.strategies.lora`` (its round loop, Fed-SB's SVD frame...).
    """
    from flwr.supercore.task_identity import TaskIdentity

    from bouquet.apps.config import resolve
    from bouquet.apps.runner import build_strategy, initial_arrays, load_server_task

    keys = {"method": method, "task": "tiny-bert-cls", "results-dir": str(tmp_path / "res"),
            "run-name": "r", "seed": 2, "local-steps": 1, "batch-size": 8, "lora.rank": 2,
            "num-server-rounds": 2, **over}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    cfg = resolve(keys)
    strategy = build_strategy(cfg, initial_arrays(cfg, load_server_task(cfg), None))  # type: ignore[arg-type]
    loaded, libraries, reply = _train_probe(keys, strategy.configure_round(1, [0])[0], tmp_path)
    assert reply == ["arrays", "metrics"], "the client answered with an error"
    assert "bouquet.strategies.lora_layout" in loaded
    assert all(m.startswith(LORA_STRATEGY_MODULES) for m in loaded), loaded
    assert "torch" in libraries  # a real training step ran


#: The LoRA names that moved into bouquet.strategies.lora_layout (issue 17).
MOVED_LORA_NAMES = ("Adapted", "split_names", "adapted_modules", "head_names", "LoraVariant",
                    "VARIANTS", "lora_variant", "lora_a_init", "merged_delta", "merge")


def test_every_old_lora_layout_import_still_works() -> None:
    """``from bouquet.strategies.lora import <name>`` names the layout module's own object."""
    from bouquet.strategies import lora, lora_layout

    for name in MOVED_LORA_NAMES:
        assert getattr(lora, name) is getattr(lora_layout, name), name


def test_a_message_with_cached_rows_imports_no_data_library(tmp_path: Path) -> None:
    """With the node's partition on disk, a message maps its rows and loads no dataset code.

    tiny-bert-cls: its first message reads the dataset with pandas. (digits-mlp no longer
    imports a data library at all; the hello test below checks it.)
    """
    _, _, cold = _message_probe("fedit", "tiny-bert-cls", tmp_path, rows=True)
    assert "pandas" in cold  # the first message loads the dataset (and fills the cache)
    _, _, warm = _message_probe("fedit", "tiny-bert-cls", tmp_path, rows=True)
    assert warm == []


#: A hello in a fresh process on a node whose partition cache is in ``sys.argv[1]``.
_HELLO_PROBE = r"""
import json, sys
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from bouquet.apps import client_app
from bouquet.wire.actions import ACTION_KEY, HELLO_ACTION
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 7, 1
ctx = Context(1, 7, {"partition-id": 1, "num-partitions": 3, "partition-cache": sys.argv[1]},
              RecordDict(), {"method": "fedavg", "task": "digits-mlp", "run-name": "r"})
msg = Message(RecordDict({"config": ConfigRecord({ACTION_KEY: HELLO_ACTION, "method": "fedavg"})}),
              dst_node_id=7, message_type="query")
size = int(client_app.query(msg, ctx).content["info"]["num-examples"])
print(json.dumps([size, sorted({m.split(".")[0] for m in sys.modules} & {"torch", "sklearn"})]))
"""


def test_a_hello_with_a_cached_partition_imports_no_torch(tmp_path: Path) -> None:
    """The second hello of a node counts from its partition cache: no task module, no torch."""
    def hello() -> list[object]:
        proc = subprocess.run([sys.executable, "-c", _HELLO_PROBE, str(tmp_path)],
                              capture_output=True, text=True, timeout=300,
                              env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    cold_size, cold = hello()
    # The first one loads the task and the dataset; digits-mlp reads the file scikit-learn
    # ships without importing scikit-learn (about 2 CPU s a process)
    assert cold == ["torch"]
    warm_size, warm = hello()
    assert warm_size == cold_size and warm == []


def test_the_strategies_package_loads_its_names_on_first_use() -> None:
    code = ("import sys, bouquet.strategies as s\n"
            "assert 'bouquet.strategies.scaffold' not in sys.modules\n"
            "from bouquet.strategies import Scafcom\n"
            "assert Scafcom is sys.modules['bouquet.strategies.scaffold'].Scafcom\n"
            "assert 'Scafcom' in dir(s)\n"
            "try:\n    s.NoSuchStrategy\nexcept AttributeError:\n    print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_every_public_strategy_name_has_a_home() -> None:
    from bouquet import strategies

    assert sorted(strategies.__all__) == sorted(strategies._HOMES)


#: The config classes that moved into bouquet.strategies.sections, by their old module.
MOVED_CONFIGS = {
    "compressed_fedavg": ("FedAvgCompressedConfig", "FedEFConfig"),
    "fedavg": ("FedAvgConfig",),
    "fedcg": ("FedcgConfig",),
    "fedkseed": ("FedKSeedConfig",),
    "linucb": ("LinUCBConfig", "DPLinUCBConfig"),
    "lora": ("LoraConfig", "FedSBConfig"),
    "scaffold": ("ScaffoldConfig", "ScallionConfig", "ScafcomConfig"),
    "uplink": ("UplinkCompression",),
}


@pytest.mark.parametrize("module", sorted(MOVED_CONFIGS))
def test_every_old_config_import_path_still_works(module: str) -> None:
    """``from bouquet.strategies.<family> import <Config>`` names the section's class."""
    import importlib

    old = importlib.import_module(f"bouquet.strategies.{module}")
    new = importlib.import_module(f"bouquet.strategies.sections.{module}")
    for name in MOVED_CONFIGS[module]:
        assert getattr(old, name) is getattr(new, name)


#: The LinUCB protocol names that moved into bouquet.strategies.linucb_protocol (issue 17).
MOVED_PROTOCOL_NAMES = ("TAIL", "Calibration", "LinUCBVariant", "VARIANTS", "variant_named",
                        "Protocol", "make_protocol", "confidence_radius", "env_section",
                        "horizon_of", "announced_values")


def test_every_old_linucb_protocol_import_still_works() -> None:
    """``from bouquet.strategies.linucb import <name>`` names the protocol module's object.

    The same object, so one definition: the strategy re-exports what its silos share.
    """
    from bouquet.strategies import linucb, linucb_protocol

    for name in MOVED_PROTOCOL_NAMES:
        assert getattr(linucb, name) is getattr(linucb_protocol, name), name


NUMPY_FREE_CLAIM = "Standard library and :mod:`bouquet.schema` only"


@pytest.mark.parametrize("module", sorted(MOVED_CONFIGS))
def test_a_section_that_claims_numpy_free_imports_no_numpy(module: str) -> None:
    """A section's docstring says what it imports: "schema only" must load no numpy."""
    import importlib

    name = f"bouquet.strategies.sections.{module}"
    claims = NUMPY_FREE_CLAIM in (importlib.import_module(name).__doc__ or "")
    code = f"import sys, {name}; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert not claims or out == "False"
