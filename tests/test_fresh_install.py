"""Every documented install works: fresh virtual environments built with the README's commands.

These tests run only under ``make test-install`` (``BOUQUET_INSTALL_TESTS=1``; ``.ci/run`` runs it
after ``make test``). They follow README.md ("Installing") and docs/deploy.md literally, from this
checkout instead of the package index:

* a server: ``pip install flwr-bouquet`` (no torch), then ``bouquet doctor <method> --server``;
* a node per extra: ``pip install torch==2.13.0`` first, then ``pip install "flwr-bouquet[<extra>]"``,
  ``bouquet doctor <method>`` and one round of the extra's default method on its default task
  (``bouquet run --engine inprocess``).

One environment grows through the extras in an order where each extra's requirements contain the
previous ones' (base < bandits < scafcom = fedcg = torch < fedkseed < lora), so each step installs
what a fresh install of that extra would hold; ``dp`` is added last, on top of ``lora``, as the docs
prescribe (``[lora]`` + ``[dp]`` for DP-SGD). Each test also asserts what must *not* be there yet
(no torch on the server or a bandits node, no peft on a FedKSeed node), which is what keeps the
shared environment honest. A test run alone (``-k``) installs just its own extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The documented CPU torch pin (README, docs/deploy.md, Makefile).
TORCH = "torch==2.13.0"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.install,
    pytest.mark.skipif(os.environ.get("BOUQUET_INSTALL_TESTS") != "1",
                       reason="fresh-venv install tests run under make test-install"),
    pytest.mark.timeout(1800),
]


class Env:
    """A fresh virtual environment and the commands a user types in it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bin = path / "bin"
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
        self.work = path.parent / "work"
        self.work.mkdir(exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env.update({"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
                         "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                         "FLWR_TELEMETRY_ENABLED": "0", "BOUQUET_TORCH_THREADS": "1",
                         "BOUQUET_CACHE": str(path.parent / "cache"),
                         "BOUQUET_RESULTS_DIR": str(path.parent / "results")})
        self.pip("install", "--upgrade", "pip")

    def sh(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """Run a command of the environment from a neutral folder; fail with its output."""
        proc = subprocess.run(list(args), cwd=self.work, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        assert proc.returncode == 0, (f"{' '.join(args)} exited {proc.returncode}\n"
                                      f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def pip(self, *args: str) -> None:
        """``pip ...`` in the environment (quiet)."""
        self.sh(str(self.bin / "python"), "-m", "pip", "-q", *args)

    def install(self, extra: str = "") -> None:
        """``pip install "flwr-bouquet[<extra>]"``, from this checkout."""
        self.pip("install", f"{ROOT}[{extra}]" if extra else str(ROOT))

    def has(self, module: str) -> bool:
        """Whether ``module`` can be found in the environment."""
        code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
        return subprocess.run([str(self.bin / "python"), "-c", code], env=self.env,
                              cwd=self.work).returncode == 0

    def bouquet(self, *args: str) -> str:
        """``bouquet ...`` (the installed console script); returns stdout."""
        return self.sh(str(self.bin / "bouquet"), *args).stdout

    def one_round(self, method: str, *sets: str, tag: str = "") -> dict[str, object]:
        """One round of ``method`` on its default task, 2 in-process nodes; the summary.

        Each call needs its own run name (``tag``): a run folder is never reused.
        """
        name = f"fresh-{method}{tag}"
        args = ["run", method, "--engine", "inprocess", "--rounds", "1", "--clients", "2",
                "--set", f"run-name={name}"]
        for s in sets:
            args += ["--set", s]
        self.bouquet(*args)
        summary = json.loads((self.path.parent / "results" / name / "summary.json").read_text())
        assert summary["rounds"] == 1 and summary["failures"]["errors"] == 0, summary
        return summary  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    return Env(tmp_path_factory.mktemp("fresh") / "venv")


def test_server_install_has_no_torch_and_its_doctor_passes(env: Env) -> None:
    env.install()
    assert not env.has("torch")
    out = env.bouquet("doctor", "ffa-lora", "--server")
    assert "federated" in out  # no task packages: the server says evaluation is federated
    env.bouquet("list")


def test_bandits_node(env: Env) -> None:
    env.install("bandits")
    assert not env.has("torch")
    env.bouquet("doctor", "fedlinucb")
    env.one_round("fedlinucb")


@pytest.mark.parametrize("extra,method", [("scafcom", "scafcom"), ("fedcg", "fedcg")])
def test_torch_node(env: Env, extra: str, method: str) -> None:
    env.pip("install", TORCH)
    env.install(extra)
    env.bouquet("doctor", method)
    env.one_round(method, "local-steps=2")


def test_fedkseed_node(env: Env) -> None:
    env.pip("install", TORCH)
    env.install("fedkseed")
    assert not env.has("peft")
    env.bouquet("doctor", "fedkseed")
    env.one_round("fedkseed", "fedkseed.local-steps=2", "fedkseed.num-seeds=64")


def test_lora_node(env: Env) -> None:
    env.pip("install", TORCH)
    env.install("lora")
    assert not env.has("opacus")
    env.bouquet("doctor", "ffa-lora")
    env.one_round("ffa-lora", "local-steps=2")


def test_lora_dp_node(env: Env) -> None:
    env.pip("install", TORCH)
    env.install("lora,dp")
    env.bouquet("doctor", "ffa-lora")
    summary = env.one_round("ffa-lora", "local-steps=2", "dp.enabled=true", tag="-dp")
    assert summary["privacy"] is not None

