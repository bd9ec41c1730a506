"""A real S3 API server for the tests: moto's server mode (``moto_server``) on 127.0.0.1,
on a free port, started by the tests themselves. Not a mock of the client: boto3,
delta-rs and pyarrow speak HTTP to it as they would to S3.

Every S3 test gets the environment of :meth:`MotoServer.env`: test credentials, a region,
the endpoint, and no instance-metadata lookup (which would reach out of the machine when
credentials are missing). A test that changes the environment further does it with the
``monkeypatch`` fixture (undone after the test) or its own ``MonkeyPatch.context()``, never
``monkeypatch.undo()``, which would drop the S3 environment with the rest.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key-do-not-print"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MotoServer:
    endpoint: str
    process: subprocess.Popen
    log: Path

    def env(self) -> dict[str, str]:
        """The AWS variables that point a client at this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            # never the instance-metadata address (169.254.169.254) when credentials are
            # missing: boto3 and pyarrow read the first, delta-rs the second
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_METADATA_ENDPOINT": "http://127.0.0.1:9",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_moto(log_dir: Path, *, extra_env: dict[str, str] | None = None, timeout: float = 60.0) -> MotoServer:
    """Start ``moto_server`` on a free port of 127.0.0.1 and wait until it answers."""
    for _ in range(3):
        port = free_port()
        log = log_dir / f"moto-{port}.log"
        env = {**os.environ, **(extra_env or {})}
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                # moto's server, its conditional writes atomic as S3's (tests/moto_atomic.py)
                [sys.executable, str(Path(__file__).with_name("moto_atomic.py")), "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break  # the port was taken meanwhile, or moto failed: see its log
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                return MotoServer(endpoint, proc, log)
            except urllib.error.HTTPError:
                return MotoServer(endpoint, proc, log)  # an answer, even a refusal
            except OSError:
                time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"moto_server did not answer on {endpoint} within {timeout:g} s; log: {log}")
    raise RuntimeError(f"moto_server exited at start ({proc.returncode}); log:\n{log.read_text()[-2000:]}")


class TcpProxy:
    """A TCP forwarder on 127.0.0.1 in front of a server, that a test switches off and on:
    :meth:`down` closes every connection and stops listening (a client meets "connection
    refused", as with a store that cannot be reached), :meth:`up` listens again on the
    same port. :meth:`hang` makes it a black hole (a store that stopped, not one that
    refuses): connections are accepted, and nothing sent either way gets through, so a
    client waits for an answer that never comes; :meth:`resume` closes those connections
    and forwards again. Bytes pass through unchanged: boto3 and delta-rs speak HTTP to the
    server behind it."""

    def __init__(self, target_port: int, rewrite=None, lose_reply=None, fake_reply=None) -> None:
        """``rewrite(bytes) -> bytes``: applied to what clients send (a store that
        treats requests its own way). ``lose_reply(bytes) -> bool``: true for the start
        of a request whose answer is lost: the request reaches the server, which carries
        it out, and the connection is closed instead of its final answer coming back.
        ``fake_reply(bytes) -> bytes | None``: for the start of a request, the whole HTTP
        answer the proxy gives instead of the server (which never sees the request), the
        connection closed after it; None: forwarded."""
        import threading

        self.rewrite = rewrite
        self.lose_reply = lose_reply
        self.fake_reply = fake_reply
        self.target_port = target_port
        self.port = free_port()
        self.hung = False
        #: connections accepted and requests swallowed while hung: a client waits on one
        self.swallowed = 0
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._guard = threading.Lock()
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        import threading

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        self._close_connections()

    def hang(self) -> None:
        """Accept, and answer nothing (see the class doc)."""
        self.hung = True

    def resume(self) -> None:
        """Close the connections that hung, and forward again."""
        self.hung = False
        self._close_connections()

    def _close_connections(self) -> None:
        with self._guard:
            conns, self._conns = self._conns, set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, listener: socket.socket) -> None:
        import threading

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: down()
            if self.hung:  # held open, never read from nor answered
                with self._guard:
                    self._conns.add(client)
                    self.swallowed += 1
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._guard:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._conns.update((client, server))
            losing: list[bool] = []  # this connection's next final answer is lost
            for a, b, upstream in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(a, b, upstream, losing), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool, losing: list[bool]) -> None:
        try:
            while data := src.recv(65536):
                if self.hung:
                    if upstream:
                        with self._guard:
                            self.swallowed += 1
                    continue  # lost in the black hole
                if upstream:
                    fake = self.fake_reply(data) if self.fake_reply is not None else None
                    if fake is not None:  # (and the connection closed: nothing of the request goes on)
                        src.sendall(fake)
                        break
                    if self.lose_reply is not None and self.lose_reply(data):
                        losing.append(True)  # (before the request goes: its answer cannot come first)
                    dst.sendall(self.rewrite(data) if self.rewrite else data)
                elif losing and not data.startswith(b"HTTP/1.1 100"):
                    break  # the final answer: lost, and the connection with it
                else:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
