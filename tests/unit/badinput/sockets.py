"""Which addresses a process or a port listens on, read from /proc (Linux): the ground truth of "binds loopback"."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int
    inode: int

    @property
    def is_loopback(self) -> bool:
        address = self.address
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return address.is_loopback

    def __str__(self) -> str:
        return f"{self.address}:{self.port}"


def _decode(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    # The kernel prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def listeners(proc: Path = Path("/proc")) -> list[Listener]:
    """Every listening TCP socket of the machine (IPv4 and IPv6)."""
    found = []
    for table in ("tcp", "tcp6"):
        path = proc / "net" / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != _LISTEN:
                continue
            address, port = fields[1].split(":")
            found.append(Listener(_decode(address), int(port, 16), int(fields[9])))
    return found


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process `pid` holds open."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for entry in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / entry)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def listeners_of_pid(pid: int) -> list[Listener]:
    inodes = socket_inodes(pid)
    return [listener for listener in listeners() if listener.inode in inodes]


def listeners_on_port(port: int) -> list[Listener]:
    return [listener for listener in listeners() if listener.port == port]
