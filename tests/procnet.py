"""Which addresses a process listens on, read from /proc (Linux): its network namespace's TCP tables."""

import ipaddress
import os
from pathlib import Path

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(hex_address: str) -> Address:
    """An address of /proc/net/tcp{,6}: 32-bit words, each in host (little-endian) byte order."""
    raw = bytes.fromhex(hex_address)
    address = ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))
    return getattr(address, "ipv4_mapped", None) or address  # ::ffff:127.0.0.1 is 127.0.0.1


def listening(pid: int) -> list[Address]:
    """The addresses the listening TCP sockets of process `pid` are bound to."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except FileNotFoundError:
            continue  # closed since the listing
        if link.startswith("socket:["):
            inodes.add(link.removeprefix("socket:[").removesuffix("]"))
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # TCP_LISTEN
                found.append(_address(fields[1].split(":")[0]))
    return found


def interfaces(pid: int) -> set[str]:
    """The network interfaces of the namespace `pid` lives in."""
    return {line.split(":")[0].strip() for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]}
