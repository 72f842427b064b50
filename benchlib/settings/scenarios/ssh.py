"""target: ssh: the scenario of two bare-metal hosts, node to node over OpenSSH (targets/ssh/), and the
hosts' settings."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ...collectors.base import Strict
from .base import Scenario


class SshScenario(Scenario):
    target: Literal["ssh"] = Field(exclude=True)
    SETTINGS: ClassVar[str | None] = "ssh"


class SshHost(Strict):
    host: str = Field(description="where ssh connects (name or address)")
    user: str = Field(default="root", description="login name on the host (ssh -l)")
    port: int = Field(default=22, ge=1, le=65535, description="the host's ssh port (ssh -p)")
    identity_file: str | None = Field(
        default=None,
        description=("private key file (ssh -i, IdentitiesOnly; ~ expands); default: ssh's own keys and agent"),
    )
    address: str | None = Field(
        default=None, description="server only: the address benchmark traffic goes to; default host"
    )


class SshSettings(Strict):
    """target: ssh: two bare-metal hosts, node to node, over OpenSSH."""

    client: SshHost = Field(description="the host that runs the benchmark clients")
    server: SshHost = Field(description="the host that runs the benchmark servers")
    options: list[str] = Field(default=[], description="extra `ssh -o` options, e.g. ConnectTimeout=10")
    command: list[str] = Field(default=["ssh"], min_length=1, description="the ssh client, possibly behind a wrapper")
    known_hosts: str | None = Field(default=None, description="known_hosts file (StrictHostKeyChecking stays on)")
