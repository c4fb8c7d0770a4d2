"""A warm worker beside a SuperNode: the node's messages run in one long-lived process.

Flower 1.42 runs every message in a fresh ``flwr-clientapp`` process, so each message pays for
the interpreter, torch, the task and the model before it trains (benchmarks/RESULTS.md,
perf-deploy), and nothing held in memory survives to the next message. A node started with the
node config ``worker-socket=PATH`` forwards each message instead to a worker that the operator
starts on the same machine, as the same user, with ``bouquet node-worker --socket PATH``:

* the ``flwr-clientapp`` process imports Flower and bouquet's ClientApp (no torch, no task),
  sends the message and its context over the Unix socket, and returns the worker's reply and
  the new ``context.state`` to Flower;
* the worker runs the very same handlers (:func:`bouquet.apps.client_app.handle`) with its
  per-process caches (run config, task, partition, procedure, FedKSeed's rebuilt model) kept
  between messages, and writes node state to the node's disk as the ClientApp would.

The node's state stays Flower's: the worker gets ``context.state`` with every message and
returns it, keeping nothing of it. Where the worker cannot be reached (no socket, nobody
listening) or runs another bouquet version, the message runs in the ``flwr-clientapp`` process as
without a worker, with a warning; once a request was sent, a broken exchange is an error reply
(the message may have trained, so it is not run a second time).

Wire format, one request per connection: three frames, each an 8-byte big-endian length and
its bytes: a JSON header, Flower's ``Message`` protobuf, Flower's ``Context`` protobuf
(:mod:`flwr.common.serde`); the answer has the same three frames (header ``{"ok": ...}``, the
reply, the context after the message). The socket file is created readable and writable by its
owner only: the worker trusts what comes through it as the node's own ClientApp.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import struct
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.common.serde import (
    context_from_proto,
    context_to_proto,
    message_from_proto,
    message_to_proto,
)
from flwr.proto.message_pb2 import Context as ProtoContext
from flwr.proto.message_pb2 import Message as ProtoMessage

log = logging.getLogger("bouquet")

#: Node-config key naming the worker's socket (``flower-supernode --node-config``).
WORKER_SOCKET_KEY = "worker-socket"
#: Largest frame either side accepts (a model update of a large LoRA model fits easily).
MAX_FRAME = 2**32
_LEN = struct.Struct(">Q")

Handler = Callable[[Message, Context], Message]


class WorkerUnavailable(RuntimeError):
    """Nothing was sent: no worker listens at the socket, or it runs another bouquet version."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flwr-bouquet")
    except PackageNotFoundError:  # a source tree on sys.path
        return "unknown"


# ---------------------------------------------------------------------- framing
def _send_frames(sock: socket.socket, *frames: bytes) -> None:
    for frame in frames:
        sock.sendall(_LEN.pack(len(frame)) + frame)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _recv_frames(sock: socket.socket, count: int) -> list[bytes]:
    frames = []
    for _ in range(count):
        (size,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
        if size > MAX_FRAME:
            raise ValueError(f"frame of {size} bytes is larger than {MAX_FRAME}")
        frames.append(_recv_exact(sock, size))
    return frames


def _message_bytes(msg: Message) -> bytes:
    return bytes(message_to_proto(msg).SerializeToString())


def _context_bytes(context: Context) -> bytes:
    return bytes(context_to_proto(context).SerializeToString())


def _parse_message(blob: bytes) -> Message:
    proto = ProtoMessage()
    proto.ParseFromString(blob)
    return message_from_proto(proto)


def _parse_context(blob: bytes) -> Context:
    proto = ProtoContext()
    proto.ParseFromString(blob)
    return context_from_proto(proto)


# ---------------------------------------------------------------------- the node's side
def worker_socket(context: Context) -> Path | None:
    """The worker's socket named by the node config, or None (no worker: run in process)."""
    setting = context.node_config.get(WORKER_SOCKET_KEY)
    if setting is None or not str(setting).strip():
        return None
    return Path(str(setting)).expanduser()


def forward(path: Path, kind: str, msg: Message, context: Context) -> Message:
    """Run ``msg`` on the worker at ``path``; set ``context.state``; return the reply.

    Raises :class:`WorkerUnavailable` when nothing was sent (the caller runs the message itself),
    and ``RuntimeError`` with the worker's traceback when the handler failed there (its
    ``context.state`` is kept all the same, as a failing handler's would be in process).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.connect(str(path))
        except OSError as exc:
            raise WorkerUnavailable(f"no node worker at {path}: {exc}") from exc
        header = json.dumps({"kind": kind, "version": _version()}).encode()
        _send_frames(sock, header, _message_bytes(msg), _context_bytes(context))
        head, reply_blob, context_blob = _recv_frames(sock, 3)
    finally:
        sock.close()
    answer: dict[str, Any] = json.loads(head)
    if answer.get("refused"):
        raise WorkerUnavailable(str(answer["refused"]))
    if context_blob:
        context.state = _parse_context(context_blob).state
    if not answer.get("ok"):
        raise RuntimeError(f"node worker at {path}: {answer.get('error', 'failed')}")
    reply = _parse_message(reply_blob)
    return Message(reply.content, reply_to=msg)


def forwarded(kind: str, handler: Handler) -> Handler:
    """``handler`` run on the node's worker when the node config names one, else in process."""

    def run(msg: Message, context: Context) -> Message:
        path = worker_socket(context)
        if path is not None:
            try:
                return forward(path, kind, msg, context)
            except WorkerUnavailable as exc:
                log.warning("%s; running the message in this process", exc)
        return handler(msg, context)

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


# ---------------------------------------------------------------------- the worker
def serve_one(conn: socket.socket, handlers: dict[str, Handler]) -> None:
    """Answer one request on ``conn`` with ``handlers[kind]`` (kept apart for the tests)."""
    head, msg_blob, context_blob = _recv_frames(conn, 3)
    request = json.loads(head)
    kind = str(request.get("kind", ""))
    if request.get("version") != _version():
        refusal = (f"the node worker runs bouquet {_version()}, the ClientApp "
                   f"{request.get('version')}")
        _send_frames(conn, json.dumps({"refused": refusal}).encode(), b"", b"")
        return
    if kind not in handlers:
        _send_frames(conn, json.dumps({"ok": False, "error": f"unknown kind {kind!r}"}).encode(),
                     b"", context_blob)
        return
    msg, context = _parse_message(msg_blob), _parse_context(context_blob)
    t0 = time.perf_counter()
    try:
        reply = handlers[kind](msg, context)
    except Exception as exc:  # the ClientApp raises it on the node's side, as in process
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        log.warning("node worker: %s message failed: %s", kind, text)
        _send_frames(conn, json.dumps({"ok": False, "error": text}).encode(), b"",
                     _context_bytes(context))
        return
    header = {"ok": True, "work_s": time.perf_counter() - t0}
    _send_frames(conn, json.dumps(header).encode(), _message_bytes(reply),
                 _context_bytes(context))


def bind(path: str | Path) -> socket.socket:
    """A listening Unix socket at ``path``, readable and writable by its owner only.

    A stale socket file (a worker that died) is replaced; any other file there is refused.
    """
    path = Path(path).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise FileExistsError(f"{path} exists and is not a socket; choose another path")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody listens: a worker that died
        else:
            raise FileExistsError(f"a node worker already listens at {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(8)
    return sock


def serve(path: str | Path, handlers: dict[str, Handler] | None = None,
          stop: threading.Event | None = None) -> int:
    """Answer requests at ``path`` one at a time, until interrupted or ``stop`` is set.

    ``handlers`` default to bouquet's ClientApp handlers. Returns the number of requests taken.
    """
    if handlers is None:
        from bouquet.apps.client_app import HANDLERS

        handlers = HANDLERS
    sock = bind(path)
    sock.settimeout(0.5)  # to look at ``stop`` between requests
    log.info("node worker listening at %s (bouquet %s, pid %d)", path, _version(), os.getpid())
    answered = 0
    try:
        while stop is None or not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            with conn:
                try:
                    serve_one(conn, handlers)
                except Exception as exc:  # a broken or malformed request: the next one is served
                    log.warning("node worker: request dropped: %s", exc)
            answered += 1
    finally:
        sock.close()
        Path(path).expanduser().resolve().unlink(missing_ok=True)
    return answered
