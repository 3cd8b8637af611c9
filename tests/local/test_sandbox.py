"""What keeps a local run to this machine and to the launcher's lifetime (local/sandbox.py): a network
namespace whose only interface is loopback, and children that the kernel kills with their parent.

Each test runs the sandbox in a process of its own: `isolate_network` moves its caller for good."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agents_operator.local import sandbox
from tests.local.standins import alive

pytestmark = pytest.mark.skipif(not sandbox.LINUX, reason="the sandbox is made of Linux process controls")

ISOLATED = textwrap.dedent(
    """
    import socket
    from agents_operator.local import sandbox

    sandbox.isolate_network()
    print(sorted(name for _, name in socket.if_nameindex()))
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()):
        print("loopback is up")
    """
)

PARENT = textwrap.dedent(
    """
    import functools, os, subprocess, time
    from agents_operator.local import sandbox

    child = subprocess.Popen(["sleep", "300"], preexec_fn=functools.partial(sandbox.die_with_parent, os.getpid()))
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


def test_an_isolated_process_has_only_loopback_and_it_is_up():
    done = subprocess.run([sys.executable, "-c", ISOLATED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['lo']", "loopback is up"]


def test_a_child_dies_with_its_parent_even_when_the_parent_is_sigkilled():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    survived = alive(child)
    if survived:
        os.kill(child, signal.SIGKILL)  # leave nothing behind, whatever the outcome
    assert not survived


def test_a_child_whose_parent_is_already_gone_ends_itself():
    code = "from agents_operator.local import sandbox; sandbox.die_with_parent(-1); print('still here')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL and done.stdout == ""


def test_elsewhere_than_linux_isolation_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(sandbox, "LINUX", False)
    with pytest.raises(sandbox.SandboxError, match=f"network namespaces are a Linux feature; this is {sys.platform}"):
        sandbox.isolate_network()
