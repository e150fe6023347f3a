"""A fork server for Spark's Python daemon: the task workers' imports done while the driver's JVM starts.

Spark starts its Python daemon (``python_daemon``) when a session's first Python task needs a
worker, and that task waits while the daemon starts and imports the job's modules: 0.45 s of a cold
1M-row snapshot on two cores, where the JVM compiles beside it (docs/benchmarks.md). The driver
starts this server before the JVM (``spark/runtime/session.py``): it imports the same modules while
the JVM starts, then waits. When Spark starts binlake's daemon, the daemon hands the server its
standard streams, environment and path; the server forks, and its child runs Spark's daemon with the
modules imported. The process Spark started stays as the daemon's stand-in: it relays its standard
input (Spark's requests to kill a worker; its end at Spark's exit) and ends with the daemon, which
ends with it — Spark stops a daemon by signalling the process it started.

The server forks a daemon for each that asks — a session starts one per kind of Python task (an
RDD's, a query's), and another if one dies — and ends with the driver (or with its session, when the
driver starts another: ``spark/runtime/session.py``). It refuses — the daemon then imports on its
own, as without it — a daemon of another interpreter, pyspark or binlake, or whose environment
differs in what an interpreter reads as it starts (``SAME_AT_START``).
"""

from __future__ import annotations

# Few and light imports: the daemon Spark starts imports this module before it hands over, and
# the first task waits for it (json and dataclasses were half its start).
import marshal
import os
import select
import signal
import socket
import struct
import sys
from importlib.machinery import PathFinder
from typing import Any

#: The environment variable that names the server's socket to the daemon (a ``spark.executorEnv``).
ADDRESS_VARIABLE = "BINLAKE_FORKSERVER"
#: Variables an interpreter reads at its start (or a library at its import): the daemon's must be
#: the server's. Spark sets them for its Python workers; the server starts with Spark's values.
SAME_AT_START = ("PYTHONHASHSEED", "PYTHONUNBUFFERED", "OMP_NUM_THREADS")
#: How long a daemon waits for the server to finish its imports before importing on its own.
READY_TIMEOUT_S = 60.0
_HEADER = struct.Struct("!I")
_REQUEST_TIMEOUT_S = 10.0  # a daemon sends its request as soon as the server is ready
_STREAMS = 3  # the daemon's standard input (a relay), output and error


def spark_values(conf: dict[str, Any]) -> dict[str, str]:
    """What Spark sets ``SAME_AT_START`` to in its Python workers' environment, under ``conf``."""
    cores = str(conf.get("spark.task.cpus", "1"))
    return {
        "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"),
        "PYTHONUNBUFFERED": "YES",
        "OMP_NUM_THREADS": str(
            conf.get("spark.executorEnv.OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", cores))
        ),
    }


class ForkServer:
    """A running server (the driver's side): its address, and its lifeline (its standard input)."""

    def __init__(self, address: str, process: Any) -> None:
        self.address = address
        self.process = process  # subprocess.Popen

    def close(self) -> None:
        """End the server and remove its socket (the daemons it forked live on with their session)."""
        import shutil

        self.process.stdin.close()
        self.process.wait()
        shutil.rmtree(os.path.dirname(self.address), ignore_errors=True)


def start(job: str | None, conf: dict[str, Any]) -> ForkServer | None:
    """Start a server importing ``job``'s task modules (every job's when None), for a session of
    ``conf``; None where a Unix socket's path would be too long."""
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix="binlake-forkserver-")
    address = os.path.join(folder, "socket")
    if len(address.encode()) > 100:  # sockaddr_un holds 108 bytes
        os.rmdir(folder)
        return None
    env = {**os.environ, **spark_values(conf)}
    if job is not None:
        from binlake.spark.runtime.preload import JOB_VARIABLE

        env[JOB_VARIABLE] = job
    # Bound here, not by the server: a daemon that connects before the server has started waits in
    # the socket's queue instead of finding no socket.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(address)
        listener.listen(8)
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, address, str(listener.fileno())],
            stdin=subprocess.PIPE,  # its lifeline: the driver's end closes when the driver ends
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            pass_fds=[listener.fileno()],
        )
    return ForkServer(address, process)


# The daemon's side.


def hand_over(address: str) -> bool:
    """Have the server at ``address`` fork this daemon, then stand in for it until it or Spark
    ends; False (nothing handed over) where the server is gone, slow or refuses."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(READY_TIMEOUT_S)
        conn.connect(address)
        if conn.recv(1) != b"r":  # ready: its imports are done
            return False
    except OSError:
        return False
    relay_in, relay_out = os.pipe()
    with conn:
        conn.settimeout(None)
        request = marshal.dumps(_request())
        socket.send_fds(conn, [_HEADER.pack(len(request))], [relay_in, 1, 2])
        os.close(relay_in)
        conn.sendall(request)
        reply = _loads(_read_all(conn))
    if "pid" not in reply:
        os.close(relay_out)
        return False
    _stand_in(int(reply["pid"]), relay_out)
    return True


def _request() -> dict[str, Any]:
    import binlake

    return {
        "executable": os.path.realpath(sys.executable),
        "pyspark": _origin("pyspark", sys.path),
        "binlake": os.path.realpath(binlake.__file__),
        "argv": sys.argv,
        "path": sys.path,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
    }


def _origin(module: str, path: list[str]) -> str | None:
    spec = PathFinder.find_spec(module, path)
    return None if spec is None or spec.origin is None else os.path.realpath(spec.origin)


def _stand_in(pid: int, relay: int) -> None:
    """Relay this process's standard input to the daemon ``pid`` until either ends (the daemon
    reads the relay's end as Spark's: it stops its workers and exits)."""
    try:
        ended = os.pidfd_open(pid)
    except OSError:  # already gone
        os.close(relay)
        return
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(ended, select.POLLIN)
    try:
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if ended in ready:
                return
            data = os.read(0, 4096)
            if not data:
                return
            os.write(relay, data)
    except OSError:  # the daemon's end closed
        return
    finally:
        os.close(relay)
        os.close(ended)


def _loads(data: bytes) -> dict[str, Any]:
    """A message of the other side (the same interpreter: ``_refusal`` checks it), {} if none."""
    try:
        message = marshal.loads(data) if data else {}
    except (EOFError, ValueError, TypeError):
        return {}
    return message if isinstance(message, dict) else {}


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


# The server's side.


def serve(address: str, listener: socket.socket) -> None:
    """Import the job's modules, then fork a daemon for each that asks on ``listener`` (bound at
    ``address``) until the driver ends or closes the server."""
    from binlake.spark.runtime.preload import JOB_VARIABLE, modules_for, preload

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the daemons it forks are reaped as they end
    preload(modules_for(os.environ.get(JOB_VARIABLE)))
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(listener, select.POLLIN)
    try:
        while 0 not in {fd for fd, _ in poller.poll()}:  # 0: the driver's end closed
            conn, _ = listener.accept()
            with conn:
                _answer(conn, listener)
    finally:
        listener.close()
        os.unlink(address)


def _answer(conn: socket.socket, listener: socket.socket) -> None:
    conn.settimeout(_REQUEST_TIMEOUT_S)
    try:
        conn.sendall(b"r")
        streams, request = _receive(conn)
    except (OSError, ValueError, EOFError, TypeError):
        return  # a daemon that gave up waiting, or a broken request: the next one
    try:
        refused = _refusal(request)
        if refused is None:
            _fork_daemon(conn, listener, streams, request)
        else:
            conn.sendall(marshal.dumps({"refused": refused}))
    except OSError:
        return
    finally:
        for fd in streams:
            os.close(fd)


def _receive(conn: socket.socket) -> tuple[list[int], dict[str, Any]]:
    header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, _STREAMS)
    if len(header) != _HEADER.size or len(fds) != _STREAMS:
        for fd in fds:
            os.close(fd)
        raise ValueError("an incomplete request")
    (size,) = _HEADER.unpack(header)
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ValueError("an incomplete request")
        data += chunk
    return fds, _loads(data)


def _refusal(request: dict[str, Any]) -> str | None:
    """Why this server cannot be the daemon of ``request``; None: it can."""
    import pyspark

    import binlake

    if request["executable"] != os.path.realpath(sys.executable):
        return "another interpreter"
    if request["pyspark"] != os.path.realpath(pyspark.__file__):
        return "another pyspark"
    if request["binlake"] != os.path.realpath(binlake.__file__):
        return "another binlake"
    different = [k for k in SAME_AT_START if request["env"].get(k) != os.environ.get(k)]
    return f"another {', '.join(different)}" if different else None


def _fork_daemon(
    conn: socket.socket, listener: socket.socket, streams: list[int], request: dict[str, Any]
) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return
    code = 1
    try:  # the daemon: this process's imports, the requesting process's everything else
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv[:] = request["argv"]
        sys.path[:] = request["path"]
        os.chdir(request["cwd"])
        conn.sendall(marshal.dumps({"pid": os.getpid()}))
        conn.close()
        from pyspark import daemon

        daemon.manager()
        code = 0
    except SystemExit as e:  # how Spark's daemon ends
        code = e.code if isinstance(e.code, int) else 1
    finally:
        os._exit(code)  # never the server's own exit handlers


def main(argv: list[str]) -> None:
    address, listener = argv
    serve(address, socket.socket(fileno=int(listener)))


if __name__ == "__main__":
    main(sys.argv[1:])
