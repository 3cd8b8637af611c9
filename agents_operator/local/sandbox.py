"""What keeps a local run to this machine and to the launcher's lifetime: Linux process controls via libc.

- **A network of the job's own.** TensorFlow's gRPC server listens on every interface whatever the
  cluster spec says: `GrpcServer::Init` binds `0.0.0.0:<port>`, and `ServerDef` has a port but no
  address. It has no authentication either: whoever reaches a ps port can run ops that read and write
  files as the user. `isolate_network` moves the launcher into a new network namespace whose only
  interface is loopback, before it starts anything; its replicas inherit it, so "every interface" is
  loopback there, and the launcher still reaches them. An unprivileged user gets the namespace by
  also creating a user namespace that maps their own ids to themselves (files stay theirs).
- **No replica outlives the launcher.** `die_with_parent`, run in each child between fork and exec,
  asks the kernel (PR_SET_PDEATHSIG) to SIGKILL the child when its parent dies, SIGKILL included,
  which no handler or `finally` survives. Chosen over a pipe watched by the child: it needs nothing of
  the replica's program (a replica may run any command). The signal fires when the *thread* that forked
  the child ends, so the launcher starts replicas from its main thread only. A replica's own children
  (environment processes) end when they see their parent gone (`trainer.envs.worker`).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

LINUX = sys.platform.startswith("linux")
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the interface name, then the flags in the union (40 bytes)
_LIBC = ctypes.CDLL(None, use_errno=True) if LINUX else None
"""Loaded once here: a child between fork and exec must not load libraries."""


class SandboxError(Exception):
    """The job's network could not be isolated; the message says why, in one line."""


def isolate_network() -> None:
    """Move this process (single-threaded) into a new network namespace with only loopback, up."""
    if not LINUX:
        raise SandboxError(f"network namespaces are a Linux feature; this is {sys.platform}")
    attempts = [CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNET] if os.geteuid() == 0 else [CLONE_NEWUSER | CLONE_NEWNET]
    uid, gid = os.geteuid(), os.getegid()
    for flags in attempts:
        if _LIBC.unshare(flags) == 0:
            break
    else:
        raise SandboxError(f"unshare(CLONE_NEWUSER | CLONE_NEWNET): {os.strerror(ctypes.get_errno())}")
    try:
        if flags & CLONE_NEWUSER:
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/setgroups", "deny")  # required before an unprivileged gid_map
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        _loopback_up()
    except OSError as error:
        raise SandboxError(f"setting up the new namespaces: {error.strerror}") from None


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        _, flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0)))
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | IFF_UP))


def die_with_parent(parent: int) -> None:
    """In a child between fork and exec: be SIGKILLed when `parent` (the launcher) dies.

    When the parent died before the request took effect, the child ends itself at once.
    """
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
