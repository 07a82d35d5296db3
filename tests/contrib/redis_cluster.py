"""A real three-master Redis Cluster on loopback ports, for the RedisFleet cluster tests.

Each node is a :class:`RedisServer` started with ``--cluster-enabled yes``; ``redis-cli
--cluster create`` assigns the 16384 slots among them (no replicas). A node also listens on
its cluster bus port, port + 10000, so both must be free. Nothing is persisted: the nodes'
``nodes.conf`` files live in a temporary directory removed on :meth:`RedisCluster.stop`.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

from ..redis_server import RedisServer

_BUS_OFFSET = 10000  # Redis Cluster's bus port is the client port + 10000


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port(taken: List[int]) -> int:
    """A port whose bus port (+10000) is free too: below the ephemeral range, so bus ports fit."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        near = {p for t in taken for p in (t, t + _BUS_OFFSET)}
        if port in near or port + _BUS_OFFSET in near:
            continue
        if _bindable(port) and _bindable(port + _BUS_OFFSET):
            return port
    raise RuntimeError("no free loopback port pair (port, port + 10000) in 20000-30000")


class ClusterNode(RedisServer):
    """One cluster-enabled redis-server: its nodes.conf in the cluster's directory."""

    def __init__(self, executable: str, port: int, directory: str) -> None:
        super().__init__(executable, port)
        self.directory = directory
        self.node_id = ""

    def command(self) -> List[str]:
        return [
            *super().command(),
            "--cluster-enabled", "yes",
            "--cluster-config-file", os.path.join(self.directory, f"nodes-{self.port}.conf"),
            "--cluster-node-timeout", "5000",
            "--dir", self.directory,
        ]

    def slots(self) -> List[int]:
        """The hash slots this node serves, as it says itself (CLUSTER NODES, its "myself" line)."""
        for line in self.cli("CLUSTER", "NODES").splitlines():
            fields = line.split()
            if len(fields) > 2 and "myself" in fields[2]:
                out: List[int] = []
                for part in fields[8:]:
                    if part.startswith("["):  # a slot being migrated or imported
                        continue
                    low, _, high = part.partition("-")
                    out.extend(range(int(low), int(high or low) + 1))
                return out
        return []


class RedisCluster:
    """Three cluster-enabled redis-servers joined into one cluster covering every slot."""

    def __init__(self, executable: str, cli: str, masters: int = 3) -> None:
        self.executable = executable
        self.cli_path = cli
        self.masters = masters
        self.directory = ""
        self.nodes: List[ClusterNode] = []

    @classmethod
    def find(cls) -> Optional[RedisCluster]:
        """A cluster for the redis-server and redis-cli on PATH, or None when either is missing."""
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        return cls(server, cli) if server and cli else None

    @property
    def addresses(self) -> List[str]:
        return [f"127.0.0.1:{n.port}" for n in self.nodes]

    def start(self, timeout: float = 30.0) -> None:
        """Start the nodes, create the cluster and wait until every node says cluster_state:ok."""
        self.directory = tempfile.mkdtemp(prefix="sume-redis-cluster-")
        ports: List[int] = []
        try:
            for _ in range(self.masters):
                self.nodes.append(self._start_node(ports))
            done = subprocess.run(
                [self.cli_path, "--cluster", "create", *self.addresses,
                 "--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True, timeout=timeout,
            )
            if done.returncode != 0:
                out = (done.stdout + done.stderr).decode(errors="replace").strip()
                raise RuntimeError(f"redis-cli --cluster create failed ({done.returncode}): {out[-500:]}")
            self.wait_ok(timeout)
            for node in self.nodes:
                node.node_id = node.cli("CLUSTER", "MYID").strip()
        except BaseException:
            self.stop()
            raise

    def _start_node(self, taken: List[int], attempts: int = 5) -> ClusterNode:
        """A started node on a free port pair; another pair if someone took this one meanwhile."""
        for attempt in range(attempts):
            port = free_cluster_port(taken)
            taken.append(port)
            node = ClusterNode(self.executable, port, self.directory)
            try:
                node.start()
            except RuntimeError:
                node.kill()
                if attempt == attempts - 1:
                    raise
                continue
            return node
        raise AssertionError("unreachable")  # pragma: no cover

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every node reports cluster_state:ok and knows all the masters."""
        deadline = time.monotonic() + timeout
        while True:
            infos = [node.cli("CLUSTER", "INFO") for node in self.nodes]
            if all("cluster_state:ok" in i and f"cluster_known_nodes:{self.masters}" in i for i in infos):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not reach cluster_state:ok within {timeout}s")
            time.sleep(0.05)

    def owner(self, key: str) -> ClusterNode:
        """The node serving the hash slot of ``key`` (by CLUSTER SLOTS of the first node)."""
        slot = self.keyslot(key)
        for node in self.nodes:
            if slot in node.slots():
                return node
        raise LookupError(f"no node serves slot {slot}")

    def keyslot(self, key: str) -> int:
        """CLUSTER KEYSLOT of ``key``, as the server computes it."""
        return int(self.nodes[0].cli("CLUSTER", "KEYSLOT", key))

    def move_slot(self, slot: int, target: ClusterNode) -> None:
        """Migrate ``slot`` and its keys to ``target`` live, as ``redis-cli --cluster reshard`` does:
        IMPORTING/MIGRATING, MIGRATE of every key, then SETSLOT NODE on every node (clients get MOVED)."""
        source = next(n for n in self.nodes if slot in n.slots())
        if source is target:
            return
        target.cli("CLUSTER", "SETSLOT", str(slot), "IMPORTING", source.node_id)
        source.cli("CLUSTER", "SETSLOT", str(slot), "MIGRATING", target.node_id)
        while True:
            keys = source.cli("CLUSTER", "GETKEYSINSLOT", str(slot), "100").split()
            if not keys:
                break
            source.cli("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", *keys)
        for node in (target, source, *self.nodes):
            node.cli("CLUSTER", "SETSLOT", str(slot), "NODE", target.node_id)
        self.wait_ok()

    def stop(self) -> None:
        """Kill every node and remove the cluster's directory."""
        for node in self.nodes:
            node.kill()
        self.nodes = []
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = ""

    def __enter__(self) -> RedisCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
