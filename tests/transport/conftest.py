"""One fixture, two transports: every contract test runs against LocalTransport and SSHTransport
(the latter over the session's real sshd, tests/ssh/sshd.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.model import Host
from orchestrator.transport import Transport
from orchestrator.transport.local import LocalTransport
from tests.ssh.sshd import SshServer


@dataclass(frozen=True)
class TransportCase:
    kind: str  # "local" or "ssh"
    transport: Transport
    scratch: Path  # a directory on this machine, which is also the sshd's machine


@pytest.fixture(scope="module", params=["local", "ssh"])
def transport_case(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TransportCase]:
    """Module-scoped: one SSH connection serves a whole test module, as it would serve an
    ``orch up``. Only the ssh variant asks for the sshd, so local runs without one."""
    kind: str = request.param
    scratch = tmp_path_factory.mktemp(f"transport-{kind}")
    transport: Transport
    if kind == "local":
        transport = LocalTransport(Host(name="local", workdir=str(scratch)))
    else:
        from orchestrator.transport.ssh import SSHTransport  # lazy, as the CLI does

        server: SshServer = request.getfixturevalue("sshd")
        transport = SSHTransport(
            server.host(scratch), known_hosts_files=[server.known_hosts], ssh_config=None
        )
    try:
        yield TransportCase(kind, transport, scratch)
    finally:
        transport.close()
