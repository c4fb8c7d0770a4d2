"""``bouquet deploy-local``: a real SuperLink and SuperNodes on loopback, then one run through them.

What it does, in order:

1. makes a throwaway certificate authority and a server certificate for ``127.0.0.1`` (TLS), and
   one ECDSA key pair per SuperNode (SuperNode authentication);
2. starts ``flower-superlink`` with TLS and ``--enable-supernode-auth``, waits until it is
   healthy, and registers each node's public key (``flwr supernode register``);
3. starts N ``flower-supernode`` processes, each with its own port, ``FLWR_HOME``,
   ``partition-id`` and ``state-dir`` (the node's saved state, see
   :mod:`bouquet.clients.persistence`);
4. runs the app with ``flwr run <app> local-fleet --stream`` and checks that ``summary.json`` exists;
5. stops every process it started, by PID, also on failure or Ctrl-C
   (:mod:`bouquet.apps.processes`: psutil, so also on macOS and Windows).

The SuperLink keeps its state in ``<fleet>/superlink.db`` (``--database``: runs, registered
keys, node ids), so after :meth:`LocalFleet.restart_superlink` the SuperNodes reconnect and are
accepted with the same keys and node ids (an in-memory SuperLink forgets them, and they exit).

Each component gets its own ``FLWR_HOME``, as on separate machines. ``--insecure`` turns TLS and
authentication off (a warning is printed); use it only to debug. docs/deploy.md shows the same
steps for a multi-machine fleet.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import IO, Any

from bouquet.apps.config import name_run
from bouquet.apps.fab import write_app
from bouquet.apps.prestart import StartupError
from bouquet.apps.processes import children, kill_pids, pids_mentioning, pids_with_env, stop_pids
from bouquet.apps.results import default_results_dir
from bouquet.apps.simulation import flower_env, free_port, run_config_arg

CONNECTION = "local-fleet"


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def make_tls(folder: Path) -> dict[str, Path]:
    """A CA and a server certificate valid for 127.0.0.1 and localhost (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bouquet-local-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP384R1())
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                       x509.DNSName("localhost")])
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(san, critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {"ca": folder / "ca.crt", "cert": folder / "server.crt", "key": folder / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    paths["key"].chmod(0o600)
    return paths


def make_node_key(folder: Path, name: str) -> tuple[Path, Path]:
    """An ECDSA (P-384) key pair in OpenSSH format, as ``flower-supernode`` expects."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    priv, pub = folder / name, folder / f"{name}.pub"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    priv.chmod(0o600)
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                  serialization.PublicFormat.OpenSSH))
    return priv, pub


class LocalFleet:
    """A SuperLink and SuperNodes on loopback, stopped by PID when the ``with`` block ends.

    Parameters
    ----------
    nodes : int
        Number of SuperNodes (partition ids 0..nodes-1).
    secure : bool
        TLS and SuperNode authentication (default). False runs everything ``--insecure``.
    workdir : Path, optional
        Where logs, certificates and Flower homes go (a temporary folder by default).
    worker : bool or collection of int
        Start a warm ``bouquet node-worker`` beside each SuperNode (True), or beside the
        SuperNodes of these indices only, and name its socket in the node's config
        (``worker-socket``; :mod:`bouquet.apps.node_worker`).

    """

    def __init__(self, nodes: int, *, secure: bool = True, workdir: Path | None = None,
                 state_root: Path | None = None, worker: bool | Collection[int] = False
                 ) -> None:
        self.num_nodes = nodes
        #: Indices of the SuperNodes that run beside a node worker.
        self.worker_nodes = frozenset(range(nodes)) if worker is True else frozenset(worker or ())
        self.secure = secure
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="bq-fleet-")).resolve()
        #: Parent of the nodes' ``state-dir`` folders (default: inside :attr:`dir`).
        self.state_root = (state_root or self.dir).resolve()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, IO[bytes]] = {}
        self.port = free_port()
        self.tls: dict[str, Path] = {}
        self.keys: dict[int, tuple[Path, Path]] = {}
        self.node_ports: dict[int, int] = {}

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalFleet:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(self, name: str) -> dict[str, str]:
        """Environment of one component (its own FLWR_HOME)."""
        home = self.dir / f"home-{name}"
        home.mkdir(parents=True, exist_ok=True)
        return flower_env(home)

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        if name in self.logs:  # a restarted component appends to its log
            self.logs.pop(name).close()
        log = open(self.dir / f"{name}.log", "ab")
        self.logs[name] = log
        proc = subprocess.Popen(cmd, cwd=self.dir, env=self.env(name), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def start(self) -> None:
        """Start the SuperLink, register keys, start every SuperNode."""
        if self.secure:
            self.tls = make_tls(self.dir / "certs")
        else:
            print("[bouquet] WARNING: --insecure: no TLS and no SuperNode authentication; "
                  "anyone on this host can join or read traffic", flush=True)
        cmd = [_bin("flower-superlink"), "--host", "127.0.0.1", "--port", str(self.port),
               "--disable-runtime-dependency-installation",
               "--database", str(self.dir / "superlink.db")]
        if self.secure:
            cmd += ["--ssl-ca-certfile", str(self.tls["ca"]), "--ssl-certfile",
                    str(self.tls["cert"]), "--ssl-keyfile", str(self.tls["key"]),
                    "--enable-supernode-auth"]
        else:
            cmd += ["--insecure"]
        self.superlink_cmd = cmd
        self._spawn("superlink", cmd)
        self.wait_healthy()
        self.write_cli_config()
        for i in range(self.num_nodes):
            if self.secure:
                self.keys[i] = make_node_key(self.dir / "certs", f"node{i}")
                self.register(self.keys[i][1], f"node{i}")
            self.start_node(i)

    def restart_superlink(self, grace: float = 20.0) -> None:
        """Stop the SuperLink (SIGTERM) and start it again on the same port and database.

        The ServerApp it ran stops with it: resume that run with ``resume-from``. The
        SuperNodes reconnect by themselves and keep their node ids (the database kept them).
        ``grace``: seconds to wait after SIGTERM before killing what is left. Flower 1.42's
        SuperLink stopped in the middle of a run waits for its open connections to close
        (among them the run's ``flwr run --stream``) and was seen still waiting after 20 s;
        the longer it is down, the longer the SuperNodes' reconnect backoff grows (up to 20 s
        between tries).
        """
        proc = self.procs.pop("superlink")
        stop_pids(sorted({proc.pid, *children(proc.pid), *self._pids_of("superlink")}),
                  grace=grace)
        proc.wait(timeout=30)
        self._spawn("superlink", self.superlink_cmd)
        self.wait_healthy()

    def online_nodes(self) -> int:
        """How many SuperNodes the SuperLink counts as online (``flwr supernode list``)."""
        out = self.flwr("supernode", "list", CONNECTION, "--format", "json")
        return out.count('"online"')

    def wait_healthy(self, timeout: float = 90.0) -> None:
        """Poll the SuperLink's /health endpoint until it answers."""
        scheme = "https" if self.secure else "http"
        ctx = ssl.create_default_context(cafile=str(self.tls["ca"])) if self.secure else None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.procs["superlink"].poll() is not None:
                raise RuntimeError(f"SuperLink exited early; see {self.dir / 'superlink.log'}")
            try:
                with urllib.request.urlopen(f"{scheme}://127.0.0.1:{self.port}/health",
                                            context=ctx, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"SuperLink not healthy after {timeout:g}s; see {self.dir}")

    def write_cli_config(self) -> None:
        """The ``flwr`` CLI connection used for registering nodes and running the app."""
        home = self.dir / "home-cli"
        home.mkdir(parents=True, exist_ok=True)
        lines = ["[superlink]", f'default = "{CONNECTION}"', "",
                 f"[superlink.{CONNECTION}]", f'address = "127.0.0.1:{self.port}"']
        if self.secure:
            lines.append(f'root-certificates = "{self.tls["ca"]}"')
        else:
            lines.append("insecure = true")
        (home / "config.toml").write_text("\n".join(lines) + "\n")

    def flwr(self, *args: str, timeout: float = 120.0, stream: bool = False) -> str:
        """Run a ``flwr`` CLI command against this fleet; return its output."""
        proc = subprocess.run([_bin("flwr"), *args], cwd=self.dir, env=self.env("cli"),
                              stdout=None if stream else subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
        out = proc.stdout.decode(errors="replace") if proc.stdout else ""
        if proc.returncode != 0:
            raise RuntimeError(f"flwr {' '.join(args)} failed ({proc.returncode}): {out[-2000:]}")
        return out

    def stop_unfinished_runs(self) -> list[int]:
        """Stop every run on this fleet that has not finished; return their run ids.

        For a caller whose ``flwr run`` timed out: the SuperLink keeps such a run live,
        and its messages would reach the nodes beside the next run's.
        """
        listing = json.loads(self.flwr("ls", CONNECTION, "--format", "json"))
        stopped = []
        for run in listing.get("runs", []):
            if not str(run.get("status", "")).startswith("finished"):
                self.flwr("stop", str(run["run-id"]), CONNECTION)
                stopped.append(int(run["run-id"]))
        return stopped

    def register(self, public_key: Path, name: str) -> None:
        """Register a SuperNode's public key with the SuperLink."""
        self.flwr("supernode", "register", str(public_key), CONNECTION, "--name", name)

    def state_dir(self, i: int) -> Path:
        """Where SuperNode ``i`` keeps its saved state (its own folder, as on its own machine)."""
        return self.state_root / f"state-node{i}"

    def start_node(self, i: int, key: Path | None = None, name: str | None = None
                   ) -> subprocess.Popen[bytes]:
        """Start SuperNode ``i`` (``partition-id=i``).

        ``key`` overrides its auth key and ``name`` its process/log name (default ``node<i>``).
        """
        port = self.node_ports.setdefault(i, free_port())
        node_config = (f"partition-id={i} num-partitions={self.num_nodes} "
                       f'state-dir="{self.state_dir(i)}"')
        if i in self.worker_nodes:
            sock = self.start_worker(i)
            node_config += f' worker-socket="{sock}"'
        cmd = [_bin("flower-supernode"), "--superlink", f"127.0.0.1:{self.port}",
               "--node-config", node_config, "--host", "127.0.0.1", "--port", str(port)]
        if self.secure:
            cmd += ["--root-certificates", str(self.tls["ca"]),
                    "--auth-supernode-private-key", str(key or self.keys[i][0])]
        else:
            cmd += ["--insecure"]
        return self._spawn(name or f"node{i}", cmd)

    def start_worker(self, i: int, timeout: float = 60.0) -> Path:
        """Start node ``i``'s ``bouquet node-worker`` (once); return its socket when it listens."""
        sock = self.dir / f"workers-node{i}" / "worker.sock"
        name = f"worker{i}"
        if name in self.procs and self.procs[name].poll() is None:
            return sock
        sock.unlink(missing_ok=True)  # a killed worker's: wait for the new one's below
        proc = self._spawn(name, [_bin("bouquet"), "node-worker", "--socket", str(sock)])
        end = time.monotonic() + timeout
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > end:
                raise StartupError(f"node worker {i} did not start (log: {self.dir / name}.log)")
            time.sleep(0.1)
        return sock

    def kill_node(self, i: int) -> None:
        """SIGKILL SuperNode ``i`` and the processes it started (a machine that dies).

        The SuperLink notices only when the node misses its heartbeat (about 43 s in Flower
        1.42); until then replies it owes are missing, then they come back as errors.
        """
        proc = self.procs.pop(f"node{i}")
        kill_pids(sorted({proc.pid, *children(proc.pid), *self._pids_of(f"node{i}")}))
        proc.wait(timeout=10)
        worker = self.procs.pop(f"worker{i}", None)  # on the same machine: it dies too
        if worker is not None:
            kill_pids([worker.pid])
            worker.wait(timeout=10)

    def restart_node(self, i: int, *, graceful: bool = True, deadline: float = 150.0
                     ) -> subprocess.Popen[bytes]:
        """Stop SuperNode ``i`` and start it again with the same key, port and state folder.

        ``graceful`` stops it with SIGTERM (it deactivates itself), otherwise with SIGKILL.
        With authentication it keeps its node id; the SuperLink refuses to activate the same
        key while it still counts the old process as online (exit code 305), so the start is
        retried every few seconds until it holds or ``deadline`` seconds have passed. Flower
        hands the node an empty ``context.state``; the ClientApp refills it from ``state-dir``.
        """
        if graceful:
            proc = self.procs.pop(f"node{i}")
            stop_pids([proc.pid] + children(proc.pid), grace=20.0)
            proc.wait(timeout=10)
        else:
            self.kill_node(i)
        end = time.monotonic() + deadline
        while True:
            node = self.start_node(i)
            try:
                code = node.wait(timeout=12)
            except subprocess.TimeoutExpired:
                return node  # activated and running
            self.procs.pop(f"node{i}", None)
            stop_pids(self._pids_of(f"node{i}"), grace=2.0)  # helpers the failed start left
            if time.monotonic() > end:
                raise RuntimeError(f"SuperNode {i} did not come back (exit code {code}); see "
                                   f"{self.dir / f'node{i}.log'}")
            time.sleep(3.0)

    def _pids_of(self, name: str) -> list[int]:
        """Processes running with component ``name``'s FLWR_HOME (also orphaned helpers)."""
        return pids_with_env("FLWR_HOME", str(self.dir / f"home-{name}"))

    def run(self, overrides: Mapping[str, Any], timeout: float = 1800.0,
            app: Path | None = None) -> Path:
        """Run the app on the fleet; return the run's ``summary.json``.

        ``app`` is the Flower App folder to run (default: one written by
        :func:`bouquet.apps.fab.write_app` for the installed flwr-bouquet).
        """
        cfg = name_run(overrides)
        results = Path(str(cfg.get("results-dir") or default_results_dir())).expanduser().resolve()
        cfg["results-dir"] = str(results)
        app = app or write_app(self.dir / "app")
        self.flwr("run", str(app), CONNECTION, "--stream", "--run-config", run_config_arg(cfg),
                  timeout=timeout, stream=True)
        run_dir = (Path(str(cfg["resume-from"])).resolve() if cfg.get("resume-from")
                   else results / str(cfg["run-name"]))
        summary = run_dir / "summary.json"
        if not summary.is_file():
            raise RuntimeError(f"the run ended without {summary}; logs in {self.dir}")
        return summary

    def stop(self) -> None:
        """Stop every process this fleet started (and their children), by PID."""
        pids = [p.pid for p in self.procs.values()]
        pids += pids_mentioning(str(self.dir))
        stop_pids(sorted(set(pids)))
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for log in self.logs.values():
            log.close()
        self.procs.clear()


#: Folder beside a results folder's runs where ``deploy-local`` nodes keep their state.
FLEET_STATE_DIR = "fleet-state"


def fleet_state_root(overrides: Mapping[str, Any]) -> Path:
    """Where a ``deploy-local`` fleet's nodes keep their state: beside the runs.

    Not in the fleet's temporary folder, so that ``--resume`` (a new fleet) finds each node's
    accountant, control variates and residuals again (nodes file them by run name and partition).
    """
    if overrides.get("resume-from"):
        run_dir = Path(str(overrides["resume-from"])).expanduser().resolve()
        return run_dir.parent / FLEET_STATE_DIR
    results = Path(str(overrides.get("results-dir") or default_results_dir())).expanduser()
    return results.resolve() / FLEET_STATE_DIR


def deploy_local(nodes: int, overrides: Mapping[str, Any], *, secure: bool = True,
                 keep: bool = False, worker: bool = False) -> Path:
    """Start a fleet, run once, stop everything; return the summary path.

    The nodes' saved state goes to :func:`fleet_state_root`, which outlives the fleet.
    ``worker``: a warm node worker beside each SuperNode (:class:`LocalFleet`).
    """
    fleet = LocalFleet(nodes, secure=secure, state_root=fleet_state_root(overrides),
                       worker=worker)
    print(f"[bouquet] fleet folder (logs, certificates): {fleet.dir}", flush=True)
    try:
        with fleet:
            return fleet.run(overrides)
    finally:
        if not keep:
            import shutil

            shutil.rmtree(fleet.dir, ignore_errors=True)
        if hasattr(os, "sync"):  # not on Windows
            os.sync()
