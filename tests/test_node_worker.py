"""The warm node worker (bouquet/apps/node_worker.py): same results, state kept, safe fall-backs."""

from __future__ import annotations

import json
import logging
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from bouquet.apps import node_worker
from bouquet.apps.client_app import HANDLERS
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.node_worker import (
    WORKER_SOCKET_KEY,
    Handler,
    bind,
    forward,
    forwarded,
    peer_is_same_user,
    serve,
    worker_socket,
)
from bouquet.apps.runner import execute
from bouquet.clients.persistence import MARKER


def _short_socket(tmp_path: Path) -> Path:
    """A socket path under the 107-byte limit of AF_UNIX (pytest's tmp_path may exceed it)."""
    return Path(tempfile.mkdtemp(prefix="bqw", dir="/tmp")) / "w.sock"


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """bouquet's handlers served at a socket from a thread; yields the path and the kinds run."""
    path = _short_socket(tmp_path)
    kinds: list[str] = []

    def counted(kind: str, handler: Handler) -> Handler:
        def run(msg: Message, context: Context) -> Message:
            kinds.append(kind)
            return handler(msg, context)
        return run

    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(path, {k: counted(k, h) for k, h in
                                                         HANDLERS.items()}, stop), daemon=True)
    thread.start()
    for _ in range(100):
        if path.exists():
            break
        threading.Event().wait(0.05)
    yield path, kinds
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and not path.exists()


def _run(tmp_path: Path, name: str, socket_path: Path | None, state_dir: str | None
         ) -> list[dict[str, float]]:
    grid = LocalGrid(3, {"method": "scafcom", "task": "digits-mlp", "num-server-rounds": 2,
                         "fraction-train": 1.0, "local-steps": 3, "seed": 5,
                         "evaluation": "central", "results-dir": str(tmp_path),
                         "run-name": name})
    for ctx in grid.contexts.values():
        if socket_path is not None:
            ctx.node_config[WORKER_SOCKET_KEY] = str(socket_path)
        if state_dir is not None:
            ctx.node_config["state-dir"] = state_dir
    summary = execute(grid, grid.run_config)
    rows = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    return [{k: r[k] for k in ("accuracy", "loss", "train_loss", "up_bytes")} for r in rows]


@pytest.mark.parametrize("state_dir", [None, "off"])
def test_a_run_through_the_worker_equals_the_run_in_process(
        tmp_path: Path, worker: tuple[Path, list[str]], state_dir: str | None) -> None:
    """SCAFCOM keeps momentum and control in ``context.state``: the worker must hand it back.

    With ``state-dir=off`` nothing is on the node's disk to restore it from, so only the
    ``context.state`` the worker returns carries it to round 2.
    """
    path, kinds = worker
    through_worker = _run(tmp_path, "w", path, state_dir)
    in_process = _run(tmp_path, "p", None, state_dir)
    assert kinds.count("query") == 3 and kinds.count("train") == 6  # 3 hellos, 2 rounds x 3
    assert through_worker == in_process
    saved = tmp_path / "w" / "client-state"  # written from the worker, as the ClientApp does
    if state_dir is None:
        assert sorted(p.name for p in saved.iterdir()) == [
            "partition-0", "partition-1", "partition-2"]
    else:
        assert not saved.exists()


def _train_message() -> Message:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 7, 1
    return Message(RecordDict({"config": ConfigRecord({"server-round": 1})}), dst_node_id=7,
                   message_type="train")


def _context(path: Path) -> Context:
    return Context(1, 7, {WORKER_SOCKET_KEY: str(path)}, RecordDict(), {})


def _serve_in_thread(path: Path, handlers: dict[str, Handler]) -> threading.Event:
    stop = threading.Event()
    threading.Thread(target=serve, args=(path, handlers, stop), daemon=True).start()
    for _ in range(100):
        if path.exists():
            break
        threading.Event().wait(0.05)
    return stop


def test_a_failing_handler_is_an_error_reply_and_its_state_is_kept(tmp_path: Path) -> None:
    """What the handler recorded before it failed reaches Flower (as a failing call's would)."""
    def fails(msg: Message, context: Context) -> Message:
        context.state["spent"] = ConfigRecord({"epsilon": 0.5})
        raise ValueError("no rows")

    path = _short_socket(tmp_path)
    stop = _serve_in_thread(path, {"train": fails})
    try:
        ctx = _context(path)
        with pytest.raises(RuntimeError, match="ValueError: no rows"):
            forward(path, "train", _train_message(), ctx)
        assert ctx.state["spent"]["epsilon"] == 0.5  # type: ignore[index]
    finally:
        stop.set()


def test_without_a_worker_the_node_runs_the_message_itself(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ran: list[int] = []

    def local(msg: Message, context: Context) -> Message:
        ran.append(1)
        return Message(RecordDict({"config": ConfigRecord({"here": 1})}), reply_to=msg)

    path = _short_socket(tmp_path)  # nobody listens there
    with caplog.at_level(logging.WARNING, logger="bouquet"):
        reply = forwarded("train", local)(_train_message(), _context(path))
    assert ran == [1] and reply.content["config"]["here"] == 1  # type: ignore[index]
    assert "no node worker at" in caplog.text


def test_a_worker_of_another_version_is_not_used(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker refuses a ClientApp of another bouquet version; the node runs it itself."""
    def never(msg: Message, context: Context) -> Message:
        raise AssertionError("the worker ran a message of another version")

    path = _short_socket(tmp_path)
    stop = _serve_in_thread(path, {"train": never})
    try:  # the worker read its version before it listened; the node's side now reads another
        monkeypatch.setattr(node_worker, "_version", lambda: "0.0.0-client")
        ran: list[int] = []

        def local(msg: Message, context: Context) -> Message:
            ran.append(1)
            return Message(RecordDict(), reply_to=msg)

        forwarded("train", local)(_train_message(), _context(path))
        assert ran == [1]
    finally:
        stop.set()


def test_the_socket_is_private_and_a_stale_one_is_replaced(tmp_path: Path) -> None:
    path = _short_socket(tmp_path)
    sock = bind(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    a, b = socket.socketpair(socket.AF_UNIX)
    assert peer_is_same_user(a)  # what both sides check before they trust the other
    a.close()
    b.close()
    with pytest.raises(FileExistsError, match="already listens"):
        bind(path)
    sock.close()  # the worker died: its socket file stays behind
    bind(path).close()  # replaced
    path.unlink()
    path.write_text("not a socket")
    with pytest.raises(FileExistsError, match="not a socket"):
        bind(path)
    shared = path.parent / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # another user could swap the socket for one of theirs
    with pytest.raises(PermissionError, match="writable by nobody else"):
        bind(shared / "w.sock")


def test_the_socket_path_appears_only_once_it_listens(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that finds the socket file must be able to connect: a file bound before
    ``listen()`` refused whoever came in between (seen as a flaky ConnectionRefusedError)."""
    path = _short_socket(tmp_path)
    seen: list[bool] = []

    class Recording(socket.socket):
        def listen(self, *args: Any) -> None:
            seen.append(path.exists())
            super().listen(*args)

    monkeypatch.setattr(node_worker.socket, "socket", Recording)
    sock = bind(path)
    try:
        assert seen == [False]
        assert stat.S_ISSOCK(path.lstat().st_mode) and path.stat().st_mode & 0o777 == 0o600
        assert [p.name for p in path.parent.iterdir()] == [path.name]  # no hidden name left
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))
    finally:
        sock.close()


def test_a_clash_of_hidden_names_removes_nothing_of_the_other_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hidden name is random; should it meet another worker's, the bind fails and that
    worker's socket stays where it is."""
    path = _short_socket(tmp_path)
    monkeypatch.setattr(node_worker.secrets, "token_hex", lambda n: "ab" * n)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hidden = path.with_name("." + ("ab" * 8)[:len(path.name) - 1])  # the name bind() draws
    other.bind(str(hidden))
    try:
        with pytest.raises(OSError):
            bind(path)
        assert hidden.exists() and not path.exists()
    finally:
        other.close()


def test_a_malformed_request_does_not_stop_the_worker(tmp_path: Path) -> None:
    path = _short_socket(tmp_path)
    stop = _serve_in_thread(path, {"train": lambda m, c: Message(RecordDict(), reply_to=m)})
    try:
        for garbage in ([b"{bad"], [b"{bad", b"x", b"y"], [b"[1]", b"x", b"y"],
                        [json.dumps({"kind": "train", "version": node_worker._version()}).encode(),
                         b"not a protobuf \xff", b"\xff"]):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(path))
                for frame in garbage:
                    s.sendall(len(frame).to_bytes(8, "big") + frame)
                s.shutdown(socket.SHUT_WR)
                s.recv(1 << 16)  # whatever it answers, if anything
        forward(path, "train", _train_message(), _context(path))  # still served
    finally:
        stop.set()


def test_the_forwarding_node_process_imports_no_torch(tmp_path: Path) -> None:
    """The flwr-clientapp side of a forwarded message loads neither torch nor a task."""
    path = _short_socket(tmp_path)
    code = f"""
import sys, threading
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from bouquet.apps import client_app
from bouquet.apps.node_worker import forwarded, serve
stop = threading.Event()
threading.Thread(target=serve, args=({str(path)!r},
    {{"train": lambda m, c: Message(RecordDict({{"config": ConfigRecord({{"ok": 1}})}}),
                                    reply_to=m)}}, stop), daemon=True).start()
import time, os
while not os.path.exists({str(path)!r}): time.sleep(0.05)
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 7, 1
msg = Message(RecordDict({{"config": ConfigRecord({{"server-round": 1}})}}), dst_node_id=7,
              message_type="train")
ctx = Context(1, 7, {{"worker-socket": {str(path)!r}}}, RecordDict(), {{}})
reply = forwarded("train", client_app.train)(msg, ctx)
stop.set()
assert reply.content["config"]["ok"] == 1
print(sorted(m for m in ("torch", "scipy", "transformers") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr[-2000:]


def test_a_broken_exchange_after_acceptance_is_an_error_and_reloads_the_state(
        tmp_path: Path) -> None:
    """The worker took the message (it may have trained): no second run in process, and the
    node's next message restores the saved state instead of going on from the old one."""
    path = _short_socket(tmp_path)
    server = bind(path)

    def accept_then_die() -> None:
        conn, _ = server.accept()
        with conn:
            node_worker._recv_frames(conn, 3)
            node_worker._send_frames(conn, json.dumps({"accepted": True}).encode())

    thread = threading.Thread(target=accept_then_die, daemon=True)
    thread.start()
    ctx = _context(path)
    ctx.state[MARKER] = ConfigRecord({"round": 1})  # restored earlier in this run
    ran: list[int] = []

    def local(msg: Message, context: Context) -> Message:
        ran.append(1)
        return Message(RecordDict(), reply_to=msg)

    with pytest.raises(RuntimeError, match="broke off the train message it had accepted"):
        forwarded("train", local)(_train_message(), ctx)
    thread.join(timeout=5)
    server.close()
    assert ran == [] and MARKER not in ctx.state


def test_the_node_config_key() -> None:
    def ctx(value: object) -> Context:
        return Context(1, 7, {WORKER_SOCKET_KEY: value}, RecordDict(), {})  # type: ignore[dict-item]

    assert worker_socket(Context(1, 7, {}, RecordDict(), {})) is None
    assert worker_socket(ctx("off")) is None and worker_socket(ctx("")) is None
    assert worker_socket(ctx("/run/w.sock")) == Path("/run/w.sock")
    with pytest.raises(ValueError, match="absolute path"):
        worker_socket(ctx("w.sock"))


def test_a_fleet_worker_process_restarts_and_stops_cleanly(tmp_path: Path) -> None:
    """``bouquet node-worker`` as a real process: LocalFleet waits for it to listen, replaces a
    killed one (its stale socket left behind), and SIGTERM makes it remove its socket."""
    from bouquet.apps.deploy import LocalFleet

    fleet = LocalFleet(1, secure=False, workdir=Path(tempfile.mkdtemp(prefix="bqf", dir="/tmp")),
                       worker=True)
    try:
        sock = fleet.start_worker(0)
        first = fleet.procs["worker0"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(sock))  # it listens
        first.kill()  # a machine that dies: no clean-up, the socket file stays
        first.wait(timeout=10)
        assert sock.exists()
        assert fleet.start_worker(0) == sock and fleet.procs["worker0"] is not first
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(sock))  # the new one listens there
    finally:
        fleet.stop()
    assert not sock.exists()  # SIGTERM: the worker closed and removed its socket
