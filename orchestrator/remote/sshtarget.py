"""Where an SSH node is (no paramiko here: the OpenSSH-master route never imports it)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONNECT_TIMEOUT = 15      # seconds, for paramiko (ssh.py) and OpenSSH (openssh.py) alike


@dataclass(frozen=True)
class SshTarget:
    """Where to connect; ``host`` may be an alias from ~/.ssh/config. None = take ssh_config's."""

    host: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    ssh_config_path: str | None = None   # default ~/.ssh/config (and /etc/ssh/ssh_config)
    connect_timeout: int | None = None
