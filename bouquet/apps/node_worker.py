"""A warm worker beside a SuperNode: the node's messages run in one long-lived process.

Flower 1.42 runs every message in a fresh ``flwr-clientapp`` process, so each message pays for
the interpreter, torch, the task and the model before it trains (benchmarks/RESULTS.md,
perf-deploy), and nothing held in memory survives to the next message. A node started with the
node config ``worker-socket=PATH`` forwards each message instead to a worker that the operator
starts on the same machine, as the same user, with ``bouquet node-worker --socket PATH``:

* the ``flwr-clientapp`` process imports Flower and bouquet's ClientApp (no torch, no task),
  sends the message and its context over the Unix socket, and returns the worker's reply and
  the new ``context.state`` to Flower;
* the worker runs the very same handlers (:data:`bouquet.apps.client_app.HANDLERS`) with its
  per-process caches (run config, task, partition, procedure, FedKSeed's rebuilt model) kept
  between messages, and writes node state to the node's disk as the ClientApp would.

The node's state stays Flower's: the worker gets ``context.state`` with every message and
returns it, keeping nothing of it. Both sides check that the other end of the socket runs
under their own user id (``SO_PEERCRED``, Linux), and the worker binds only in a folder that
this user owns and nobody else may write to.

Where the worker cannot be reached, runs another bouquet version or does not accept the message,
the message runs in the ``flwr-clientapp`` process as without a worker, with a warning. Once the
worker has accepted a message, a broken exchange is an error reply (the message may have trained,
so it is not run a second time), and the node's state is marked as not restored, so that the next
message reloads it from ``state-dir`` (:func:`bouquet.clients.persistence.restore`) instead of
going on from the state before this message.

Wire format, one request per connection, each frame an 8-byte big-endian length and its bytes:
the node sends three frames (a JSON header, Flower's ``Message`` protobuf, Flower's ``Context``
protobuf, :mod:`flwr.common.serde`); the worker answers one frame (JSON: accepted or refused)
and, when it accepted, three more (a JSON header ``{"ok": ...}``, the reply, the context after
the message).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import socket
import stat
import struct
import threading
import time
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

from bouquet.clients.persistence import MARKER

log = logging.getLogger("bouquet")

#: Node-config key naming the worker's socket (``flower-supernode --node-config``).
WORKER_SOCKET_KEY = "worker-socket"
#: Largest frame either side accepts: protobuf's own limit on one message.
MAX_FRAME = 2**31 - 1
#: How long the worker waits for a request's frames once a connection is open (seconds).
REQUEST_TIMEOUT = 60.0
_LEN = struct.Struct(">Q")

Handler = Callable[[Message, Context], Message]


class WorkerUnavailable(RuntimeError):
    """Nothing ran on the worker: none listens, it is not ours, or it refused the message."""


@functools.lru_cache(maxsize=1)
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flwr-bouquet")
    except PackageNotFoundError:  # a source tree on sys.path
        return "unknown"


# ---------------------------------------------------------------------- framing
def _send_frames(sock: socket.socket, *frames: bytes) -> None:
    for frame in frames:
        sock.sendall(_LEN.pack(len(frame)))
        sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 20))
        if k == 0:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _recv_frames(sock: socket.socket, count: int) -> list[bytes]:
    frames = []
    for _ in range(count):
        (size,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
        if size > MAX_FRAME:
            raise ValueError(f"frame of {size} bytes is larger than {MAX_FRAME}")
        frames.append(_recv_exact(sock, size))
    return frames


def _json_object(blob: bytes) -> dict[str, Any]:
    value = json.loads(blob)
    if not isinstance(value, dict):
        raise ValueError("header is not a JSON object")
    return value


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


def peer_is_same_user(sock: socket.socket) -> bool:
    """Whether the process at the other end of ``sock`` runs under this process's user id.

    Read with ``SO_PEERCRED`` (Linux); where the platform cannot tell, the answer is False, so
    that neither side trusts an unknown peer.
    """
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return False
    creds = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


# ---------------------------------------------------------------------- the node's side
def worker_socket(context: Context) -> Path | None:
    """The worker's socket named by the node config, or None (no worker: run in process).

    ``off`` (or an empty value) means no worker. A relative path is refused: the SuperNode and
    the worker do not share a working folder.
    """
    setting = context.node_config.get(WORKER_SOCKET_KEY)
    text = "" if setting is None else str(setting).strip()
    if text.lower() in ("", "off", "none", "false"):
        return None
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise ValueError(f"node config {WORKER_SOCKET_KEY}={text!r}: give an absolute path")
    return path


def forward(path: Path, kind: str, msg: Message, context: Context) -> Message:
    """Run ``msg`` on the worker at ``path``; set ``context.state``; return the reply.

    Parameters
    ----------
    path : Path
        The worker's socket.
    kind : str
        ``train``, ``evaluate`` or ``query``: which handler the worker runs.
    msg, context : Message, Context
        What Flower gave the ClientApp.

    Returns
    -------
    Message
        The worker's reply content, as a reply to ``msg``.

    Raises
    ------
    WorkerUnavailable
        Nothing ran on the worker (none listens, another user's or another version's process
        listens, or it did not accept the message): the caller may run the message itself.
    RuntimeError
        The worker accepted the message and the handler failed there (``context.state`` is
        what the handler left, as a failing handler's would be in process), or the exchange
        broke after the worker accepted it (``context.state`` is then marked as not restored,
        so the next message reloads the node's saved state).

    """
    request = [json.dumps({"kind": kind, "version": _version()}).encode(), _message_bytes(msg),
               _context_bytes(context)]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.connect(str(path))
            if not peer_is_same_user(sock):
                raise WorkerUnavailable(f"the process at {path} does not run as this user")
            _send_frames(sock, *request)
            (first,) = _recv_frames(sock, 1)
        except OSError as exc:
            raise WorkerUnavailable(f"no node worker at {path}: {exc}") from exc
        accepted = _json_object(first)
        if not accepted.get("accepted"):
            raise WorkerUnavailable(str(accepted.get("refused", "the worker refused the message")))
        try:
            head, reply_blob, context_blob = _recv_frames(sock, 3)
        except (OSError, ValueError) as exc:
            context.state.pop(MARKER, None)  # reload the saved state on the next message
            raise RuntimeError(f"node worker at {path} broke off the {kind} message it had "
                               f"accepted: {exc}") from exc
    finally:
        sock.close()
    answer = _json_object(head)
    if context_blob:
        context.state = _parse_context(context_blob).state
    else:
        context.state.pop(MARKER, None)
    if not answer.get("ok"):
        raise RuntimeError(f"node worker: {answer.get('error', 'failed')}")
    reply = _parse_message(reply_blob)
    if reply.has_error():
        raise RuntimeError(f"node worker: {reply.error.reason}")
    return Message(reply.content, reply_to=msg)


def forwarded(kind: str, handler: Handler) -> Handler:
    """``handler`` run on the node's worker when the node config names one, else in process."""

    @functools.wraps(handler)
    def run(msg: Message, context: Context) -> Message:
        path = worker_socket(context)
        if path is not None:
            try:
                return forward(path, kind, msg, context)
            except WorkerUnavailable as exc:
                log.warning("%s; running the message in this process", exc)
        return handler(msg, context)

    return run


# ---------------------------------------------------------------------- the worker
def serve_one(conn: socket.socket, handlers: dict[str, Handler], version: str) -> None:
    """Answer one request on ``conn`` with ``handlers[kind]`` (kept apart for the tests).

    ``version`` is the worker's bouquet version (a request from another version is refused).
    """
    if not peer_is_same_user(conn):
        _send_frames(conn, json.dumps({"refused": "the worker serves its own user only"}).encode())
        return
    conn.settimeout(REQUEST_TIMEOUT)
    head, msg_blob, context_blob = _recv_frames(conn, 3)
    request = _json_object(head)
    kind = str(request.get("kind", ""))
    if request.get("version") != version:
        refusal = f"the node worker runs bouquet {version}, the ClientApp {request.get('version')}"
    elif kind not in handlers:
        refusal = f"the node worker has no {kind!r} handler"
    else:
        refusal = ""
    if refusal:
        _send_frames(conn, json.dumps({"refused": refusal}).encode())
        return
    msg, context = _parse_message(msg_blob), _parse_context(context_blob)
    _send_frames(conn, json.dumps({"accepted": True}).encode())
    conn.settimeout(None)
    header: dict[str, Any]
    started = time.perf_counter()
    try:
        reply_blob = _message_bytes(handlers[kind](msg, context))
        header = {"ok": True}
        log.info("node worker: %s message of run %d answered in %.2f s", kind, msg.metadata.run_id,
                 time.perf_counter() - started)
    except Exception as exc:  # the ClientApp raises it on the node's side, as in process
        log.exception("node worker: %s message failed", kind)
        reply_blob = b""
        header = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    _send_frames(conn, json.dumps(header).encode(), reply_blob, _context_bytes(context))


def bind(path: str | Path) -> socket.socket:
    """A listening Unix socket at ``path``, readable and writable by its owner only.

    The folder must belong to this user and be writable by nobody else (else another user could
    replace the socket). A stale socket file (a worker that died) is replaced; a live one or any
    other file there is refused. The socket listens under a hidden name in the same folder
    before it is linked to ``path``, so a node that finds ``path`` can connect (bound there
    directly, the file existed before ``listen()``, and a node that came in between was
    refused).
    """
    path = Path(path).expanduser().resolve()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = path.parent.stat()
    if folder.st_uid != os.getuid() or folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"{path.parent} must belong to this user and be writable by "
                              "nobody else (chmod 700)")
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
    # as long as ``path``'s own name (AF_UNIX caps a path's length), two characters at least;
    # a clash with another worker's hidden name fails the bind and removes nothing of theirs
    hidden = path.with_name("." + secrets.token_hex(8)[:max(len(path.name) - 1, 1)])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = False
    try:
        sock.bind(str(hidden))
        bound = True
        os.chmod(hidden, 0o600)
        sock.listen(8)
        os.link(hidden, path)  # refuses to replace a file that appeared meanwhile
    except FileExistsError as exc:  # another worker bound ``path`` since the check above
        sock.close()
        raise FileExistsError(f"a node worker already listens at {path}") from exc
    except BaseException:
        sock.close()
        raise
    finally:
        if bound:  # a kill before this line leaves the hidden name behind (harmless, unused)
            hidden.unlink(missing_ok=True)
    return sock


def serve(path: str | Path, handlers: dict[str, Handler] | None = None,
          stop: threading.Event | None = None) -> int:
    """Answer requests at ``path`` one at a time, until interrupted or ``stop`` is set.

    ``handlers`` default to bouquet's ClientApp handlers. A message being answered when
    ``stop`` is set is finished first. Returns the number of connections taken.
    """
    if handlers is None:
        from bouquet.apps.client_app import HANDLERS

        handlers = HANDLERS
    version = _version()
    sock = bind(path)
    where = Path(path).expanduser().resolve()
    inode = where.stat().st_ino
    sock.settimeout(0.5)  # to look at ``stop`` between requests
    log.info("node worker listening at %s (bouquet %s, pid %d)", where, version, os.getpid())
    taken = 0
    try:
        while stop is None or not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:  # e.g. out of file descriptors: wait, then go on
                log.warning("node worker: accept failed: %s", exc)
                time.sleep(0.5)
                continue
            taken += 1
            with conn:
                try:
                    serve_one(conn, handlers, version)
                except Exception as exc:  # a broken or malformed request: the next one is served
                    log.warning("node worker: request dropped: %s", exc)
    finally:
        sock.close()
        try:  # only our own socket: a newer worker may have replaced it
            if where.stat().st_ino == inode:
                where.unlink()
        except FileNotFoundError:
            pass
    return taken
