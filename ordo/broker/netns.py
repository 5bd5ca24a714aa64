"""A network namespace per Kafka node, so that a chaos test can cut one node off the network and heal it.

``KafkaCluster(3, isolated=True)`` runs each node in a namespace of its own (``ip netns``), joined to the host
by a veth pair on one bridge: node *i* listens on ``10.A.B.i`` and every process on the host reaches it
through the bridge. ``cut(i)`` takes the host end of node *i*'s link down, which is a network partition as
Kafka sees one: open connections stall (no reset), new ones time out, in both directions, while the process
runs on (unlike SIGSTOP, its timers fire and it acts on being alone). ``heal(i)`` brings the link back.

Needs Linux, root (or CAP_NET_ADMIN) and iproute2; :func:`unavailable` says why not, for a test to skip with.
Interface names carry a random tag, so clusters side by side never meet; ``destroy`` (also run at exit for a
cluster left behind) removes the namespaces, the links and the bridge.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from ordo.kernel.errors import OrdoError


class NetworkSetupError(OrdoError):
    """A namespace, link or bridge could not be made (the message holds ip's own words)."""


def _ip(*args: str, namespace: str | None = None) -> None:
    command = ["ip", *args] if namespace is None else ["ip", "netns", "exec", namespace, "ip", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise NetworkSetupError(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.stdout.strip()}")


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can (tried: a namespace is added and removed)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not on PATH"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CAP_NET_ADMIN)"
    probe = f"ordo-probe-{os.getpid()}-{random.randrange(1 << 16):04x}"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "delete", probe)
    except (NetworkSetupError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot add a network namespace: {exc}"
    return None


def _subnets_in_use() -> list[ipaddress.IPv4Network]:
    done = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=30, check=False)
    found = []
    for line in done.stdout.splitlines():
        words = line.split()
        if "inet" in words:
            found.append(ipaddress.IPv4Interface(words[words.index("inet") + 1]).network)
    return found


@dataclass
class NodeNetwork:
    """``size`` namespaces on one bridge (see the module's docstring)."""

    size: int
    tag: str = field(default_factory=lambda: f"{random.randrange(1 << 20):05x}")
    subnet: ipaddress.IPv4Network | None = None
    created: bool = False

    @property
    def bridge(self) -> str:
        return f"ob{self.tag}"

    def namespace(self, index: int) -> str:
        return f"ordo-{self.tag}-{index}"

    def host_link(self, index: int) -> str:
        return f"ob{self.tag}h{index}"

    def node_link(self, index: int) -> str:
        return f"ob{self.tag}n{index}"

    def address(self, index: int) -> str:
        """Node ``index``'s (1-based) address."""
        assert self.subnet is not None, "the network is not created"
        return str(self.subnet.network_address + index)

    def exec_prefix(self, index: int) -> list[str]:
        """The command prefix that runs a program inside node ``index``'s namespace (it keeps its pid)."""
        return ["ip", "netns", "exec", self.namespace(index)]

    def create(self) -> NodeNetwork:
        used = _subnets_in_use()
        free = [
            net
            for net in (ipaddress.IPv4Network(f"10.{a}.{b}.0/24") for a in range(200, 250) for b in range(256))
            if not any(net.overlaps(other) for other in used)
        ]
        if not free:
            raise NetworkSetupError("no free 10.200-249.x.0/24 subnet for the node network")
        self.subnet = random.choice(free)
        self.created = True  # from here on, destroy() cleans whatever part was made
        gateway = f"{self.subnet.network_address + 254}/{self.subnet.prefixlen}"
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", gateway, "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for index in range(1, self.size + 1):
            namespace, host, node = self.namespace(index), self.host_link(index), self.node_link(index)
            _ip("netns", "add", namespace)
            _ip("link", "add", host, "type", "veth", "peer", "name", node)
            _ip("link", "set", node, "netns", namespace)
            _ip("link", "set", host, "master", self.bridge)
            _ip("link", "set", host, "up")
            _ip("addr", "add", f"{self.address(index)}/{self.subnet.prefixlen}", "dev", node, namespace=namespace)
            _ip("link", "set", node, "up", namespace=namespace)
            _ip("link", "set", "lo", "up", namespace=namespace)
        return self

    def cut(self, index: int) -> None:
        """Cut node ``index`` off: its link to the bridge goes down (both directions, connections stall)."""
        _ip("link", "set", self.host_link(index), "down")

    def heal(self, index: int) -> None:
        """Bring node ``index``'s link back up."""
        _ip("link", "set", self.host_link(index), "up")

    def destroy(self) -> None:
        """Remove the namespaces (their veth pairs go with them) and the bridge; ignores what is already gone."""
        if not self.created:
            return
        for index in range(1, self.size + 1):
            subprocess.run(["ip", "link", "delete", self.host_link(index)], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "delete", self.namespace(index)], capture_output=True, check=False)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)
        self.created = False
