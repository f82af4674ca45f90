"""ssh_config is the user's: an alias with ProxyJump through a bastion works, host keys are verified on
both hops, and the bastion really carries the connection (no bastion, no connection)."""

import pytest
import yaml

from orchestrator.cli import main

pytestmark = pytest.mark.e2e


def bastion_config(bastion, target, known, extra: str = "") -> str:
    """ssh_config text: ``jumpbox`` (the bastion) and ``gpu-node`` behind it (ProxyJump), host keys checked on
    both hops against ``known``; ``extra``: more lines for gpu-node."""
    return (f"Host jumpbox\n    HostName {bastion.host}\n    Port {bastion.port}\n    User {bastion.user}\n"
            f"    IdentityFile {bastion.identity_file}\n    UserKnownHostsFile {known}\n"
            f"    StrictHostKeyChecking yes\n\n"
            f"Host gpu-node\n    HostName {target.host}\n    Port {target.port}\n    User {target.user}\n"
            f"    IdentityFile {target.identity_file}\n    UserKnownHostsFile {known}\n"
            f"    StrictHostKeyChecking yes\n    ProxyJump jumpbox\n{extra}")


def test_proxyjump_through_a_bastion(make_node, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    monkeypatch.setenv("TUNE_REMOTE_RECONNECT_S", "0")
    bastion = make_node("current", proxy=False)
    target = make_node("current", proxy=False)
    ctr = next(iter(target.containers.values()))
    known = tmp_path / "known_hosts"
    known.write_text(bastion.known_hosts_line + "\n" + target.known_hosts_line + "\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(bastion_config(bastion, target, known))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {"gpu-node": {"ssh_config": str(cfg),
                                                          "containers": {ctr.name: {}}}}}))
    base = ["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "-q", "run", "--node", "gpu-node",
            "--container", ctr.name, "--variant", "a8w8_blockscale", "--nk", "4096,512", "--m-preset", "1,64",
            "--yes"]
    assert main([*base, "--job-id", "pj1"]) == 0
    assert len(ctr.launches()) == 1
    # the bastion's host key is verified too: an unknown bastion key is refused before anything runs
    known.write_text(target.known_hosts_line + "\n")
    capsys.readouterr()
    assert main([*base, "--job-id", "pj2"]) == 3
    assert "not known" in capsys.readouterr().err
    # and the bastion carries the connection: without it, no connection at all
    known.write_text(bastion.known_hosts_line + "\n" + target.known_hosts_line + "\n")
    bastion.stop_sshd()
    assert main([*base, "--job-id", "pj3"]) == 3
    assert len(ctr.launches()) == 1


def test_every_ssh_socket_has_tcp_nodelay_gateways_included(make_node, tmp_path):
    """Without TCP_NODELAY each new channel waits ~40 ms for a delayed ACK: check the real sockets."""
    import socket

    from orchestrator.remote.shell import Cmd
    from orchestrator.remote.ssh import SshTarget, SshTransport

    bastion = make_node("current", proxy=False)
    target = make_node("current", proxy=False)
    known = tmp_path / "known_hosts"
    known.write_text(bastion.known_hosts_line + "\n" + target.known_hosts_line + "\n")
    cfg = tmp_path / "ssh_config"
    common = f"    UserKnownHostsFile {known}\n    StrictHostKeyChecking yes\n"
    cfg.write_text(
        f"Host jumpbox\n    HostName {bastion.host}\n    Port {bastion.port}\n    User {bastion.user}\n"
        f"    IdentityFile {bastion.identity_file}\n{common}\n"
        f"Host direct\n    HostName {target.host}\n    Port {target.port}\n    User {target.user}\n"
        f"    IdentityFile {target.identity_file}\n{common}\n"
        f"Host behind\n    HostName {target.host}\n    Port {target.port}\n    User {target.user}\n"
        f"    IdentityFile {target.identity_file}\n{common}    ProxyJump jumpbox\n")

    def nodelay(sock):
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    direct = SshTransport(SshTarget("direct", ssh_config_path=str(cfg)))
    behind = SshTransport(SshTarget("behind", ssh_config_path=str(cfg)))
    try:
        assert direct.run(Cmd(("true",))).ok
        assert nodelay(direct.conn.transport.sock) == 1
        assert behind.run(Cmd(("true",))).ok
        assert not isinstance(behind.conn.transport.sock, socket.socket)  # a channel of the gateway
        assert nodelay(behind.conn.gateway.transport.sock) == 1
    finally:
        direct.close()
        behind.close()
