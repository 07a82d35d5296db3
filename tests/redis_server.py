"""A real redis-server on a free loopback port: the one the Redis tests and the benchmarks start.

Project tooling, not shipped: ``benchmarks/`` imports it from here too (``tests.redis_server``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import List, Optional

HOW_TO_GET = (
    "redis-server is not on PATH: the Redis fleet tests start a real one "
    "(Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis)"
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process without persistence; can be killed, restarted and paused."""

    def __init__(self, executable: str, port: Optional[int] = None) -> None:
        self.executable = executable
        self.port = port or free_port()
        self.process: Optional[subprocess.Popen[bytes]] = None

    @classmethod
    def find(cls) -> Optional[RedisServer]:
        """A server for the redis-server on PATH, or None when there is none."""
        exe = shutil.which("redis-server")
        return cls(exe) if exe else None

    @property
    def url(self) -> str:
        """redis:// URL of database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> List[str]:
        """The command line: loopback only, no RDB snapshots, no AOF."""
        return [
            self.executable, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--protected-mode", "yes", "--loglevel", "warning",
        ]

    def start(self, timeout: float = 10.0) -> None:
        """Start the server (on the same port as before) and wait until it answers PING."""
        if self.alive():
            return
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {err.strip()}")
            if self.ping():
                return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def ping(self) -> bool:
        """True when the server answers PING within 0.5 s."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the server (its data is gone; the port is free again)."""
        if self.process is not None and self.process.poll() is None:
            self.resume()
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()

    def pause(self) -> None:
        """SIGSTOP: the server accepts connections but answers nothing (a slow Redis)."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after pause()."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def cli(self, *args: str) -> str:
        """Run redis-cli against this server and return its output."""
        cli = shutil.which("redis-cli") or os.path.join(os.path.dirname(self.executable), "redis-cli")
        done = subprocess.run(
            [cli, "-h", "127.0.0.1", "-p", str(self.port), *args],
            capture_output=True, check=True, timeout=30,
        )
        return done.stdout.decode()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
