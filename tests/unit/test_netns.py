"""``ordo.broker.netns``: a node in a namespace of its own is reachable, cut off, reachable again, then all is removed."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from ordo.broker.netns import NodeNetwork, unavailable

WHY = unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"network namespaces: {WHY}")

SERVER = """
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 7000))
s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"hi")
    c.close()
"""


def reaches(address: str) -> bool:
    try:
        with socket.create_connection((address, 7000), timeout=1.0) as conn:
            return conn.recv(2) == b"hi"
    except OSError:
        return False


def test_a_node_is_cut_off_and_healed_and_the_network_removed() -> None:
    network = NodeNetwork(2).create()
    try:
        servers = [
            subprocess.Popen(
                [*network.exec_prefix(i), sys.executable, "-c", SERVER, network.address(i)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in (1, 2)
        ]
        try:
            for server in servers:
                assert server.stdout is not None and server.stdout.readline().strip() == "listening"
            assert reaches(network.address(1)) and reaches(network.address(2))
            network.cut(1)
            assert not reaches(network.address(1)), "a cut-off node still answered"
            assert reaches(network.address(2)), "cutting node 1 cut node 2 too"
            network.heal(1)
            deadline = time.monotonic() + 10
            while not reaches(network.address(1)) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert reaches(network.address(1)), "a healed node stayed unreachable"
        finally:
            for server in servers:
                server.kill()
                server.wait(timeout=10)
    finally:
        network.destroy()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert network.namespace(1) not in names and network.namespace(2) not in names
    assert network.bridge not in links and network.host_link(1) not in links
