"""Host keys verified the way the user's ssh would: StrictHostKeyChecking (yes/ask refuse an unknown key,
accept-new records it, no warns) and UserKnownHostsFile from ssh_config, on every hop of a ProxyJump
chain; paramiko never writes the user's known_hosts itself."""

from __future__ import annotations

import base64
import hashlib
import os
import sys

import fabric
import paramiko

from ..errors import HostKeyError


def hops(conn: fabric.Connection):
    """This connection, then each ProxyJump gateway of its chain (the last one is the first TCP hop)."""
    while isinstance(conn, fabric.Connection):
        yield conn
        conn = conn.gateway


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's form (`ssh-keygen -lf`): SHA256:<base64 of the sha256 of the key blob, no padding> (S-03)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, cert_authority: bool = False):
        self.cert_authority = cert_authority

    def missing_host_key(self, client, hostname, key):
        raise HostKeyError(
            f"host key for {hostname} is not known ({key.get_name()} {fingerprint(key)})",
            hint=("known_hosts trusts a host certificate authority (@cert-authority), which tune-remote's SSH "
                  "library cannot check: add the host's own key (ssh-keyscan) or " if self.cert_authority else
                  "verify the fingerprint, then add it to known_hosts (e.g. ssh-keyscan), or ")
            + "rerun with --accept-new-host-key",
        )


class _WarnUnknown(paramiko.MissingHostKeyPolicy):
    """StrictHostKeyChecking no: accepted, but said on one visible line with the fingerprint (S-02)."""

    def missing_host_key(self, client, hostname, key):
        sys.stderr.write(f"tune-remote: warning: accepting the unknown host key of {hostname} ({key.get_name()} "
                         f"{fingerprint(key)}) because ssh_config says StrictHostKeyChecking no\n")


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """OpenSSH's accept-new: remember an unknown key; a changed key is still refused (by paramiko)."""

    def __init__(self, save_to: str, hashed: bool = False):
        self.save_to = save_to
        self.hashed = hashed

    def missing_host_key(self, client, hostname, key):
        client.get_host_keys().add(hostname, key.get_name(), key)
        os.makedirs(os.path.dirname(self.save_to) or ".", exist_ok=True)
        name = paramiko.HostKeys.hash_host(hostname) if self.hashed else hostname   # HashKnownHosts yes
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        with open(self.save_to, "a", encoding="utf-8") as fh:
            fh.write(line)
        sys.stderr.write(f"tune-remote: added {hostname} ({key.get_name()} {fingerprint(key)}) to {self.save_to}\n")


def _has_cert_authority(files: list[str]) -> bool:
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                if any(line.lstrip().startswith("@cert-authority") for line in fh):
                    return True
        except OSError:
            continue
    return False


def _known_hosts_files(conn: fabric.Connection) -> list[str]:
    value = conn.ssh_config.get("userknownhostsfile")
    if isinstance(value, list):
        value = " ".join(value)
    files = value.split() if value else ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
    return [os.path.expanduser(f) for f in files]


def secure(conn: fabric.Connection, accept_new: bool) -> None:
    """Verify host keys the way the user's ssh would, on this connection and every gateway."""
    for hop in hops(conn):
        strict = str(hop.ssh_config.get("stricthostkeychecking", "ask")).lower()
        client = hop.client
        files = _known_hosts_files(hop)
        for path in files:
            if os.path.exists(path):
                client.load_host_keys(path)  # verify against it; never rewritten by paramiko
        if os.path.exists("/etc/ssh/ssh_known_hosts"):
            client.load_system_host_keys("/etc/ssh/ssh_known_hosts")
        if strict in ("no", "off"):
            policy: paramiko.MissingHostKeyPolicy = _WarnUnknown()
        elif strict == "accept-new" or accept_new:
            policy = _AcceptNew(files[0], str(hop.ssh_config.get("hashknownhosts", "no")).lower() == "yes")
        else:  # yes / ask (non-interactive: refuse)
            policy = _RefuseUnknown(_has_cert_authority(files + ["/etc/ssh/ssh_known_hosts"]))
        client.set_missing_host_key_policy(policy)
        client._host_keys_filename = None  # paramiko must never save over the user's known_hosts
