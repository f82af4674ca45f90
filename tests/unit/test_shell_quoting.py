"""The one quoting function: nothing a user gives ever reaches a shell unquoted."""

import subprocess

import pytest

from orchestrator.remote.docker import DockerExecTransport
from orchestrator.remote.local import LocalTransport
from orchestrator.remote.shell import Cmd, display, render, sh

NASTY = [
    "/workspace/logs/run 1 $(touch /tmp/pwned);x.log",
    "a'b\"c`d`$HOME\\n;&&|| >x <y *",
    "",
    "-n",
    "line\nbreak",
]


@pytest.mark.parametrize("value", NASTY)
def test_render_round_trips_through_a_real_shell(value, tmp_path):
    cmd = Cmd(("printf", "%s", value), env={"X": value}, cwd=str(tmp_path))
    out = subprocess.run(["sh", "-c", render(cmd)], capture_output=True, check=True)
    assert out.stdout.decode() == value
    assert not (tmp_path / "x").exists()


def test_docker_wrapping_quotes_the_inner_command_once(tmp_path):
    """`docker exec CTR sh -c <line>`: replaced by a fake docker that runs `sh -c <line>` itself."""
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\nshift 3\nexec "$@"\n')  # drop "exec -i CTR"
    fake.chmod(0o755)
    marker = tmp_path / "pwned"
    value = f"run 1 $(touch {marker});x.log"
    outer = DockerExecTransport(LocalTransport(), "ctr", docker=(str(fake),))
    # the host side runs `sh -c <rendered wrap>` like sshd would
    host_line = render(outer.wrap(Cmd(("printf", "%s", value))))
    out = subprocess.run(["sh", "-c", host_line], capture_output=True, check=True)
    assert out.stdout.decode() == value
    assert not marker.exists()


def test_sh_passes_values_as_positional_args(tmp_path):
    value = "$(touch pwned) ; echo hi"
    res = LocalTransport().run(sh('printf "%s" "$1"', value), timeout=10)
    assert res.stdout.decode() == value


def test_display_is_the_line_that_runs():
    # no masking pretence (S-06): secrets never enter a Cmd (inventory env goes in the launch request on stdin)
    cmd = Cmd(("tool",), env={"A": "1 2"}, cwd="/x y")
    assert display(cmd) == render(cmd) == "cd '/x y' && exec env 'A=1 2' tool"


def test_invalid_env_name_is_refused():
    with pytest.raises(ValueError):
        render(Cmd(("true",), env={"A;rm -rf /": "x"}))


def test_trace_names_each_container_round_trip_but_no_env_value(tmp_path, monkeypatch, capsys):
    """TUNE_REMOTE_TRACE=1: one stderr line per exec with its time; a secret in the env never shows."""
    from orchestrator.remote import trace
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\nshift 3\nexec "$@"\n')
    fake.chmod(0o755)
    outer = DockerExecTransport(LocalTransport(), "ctr", docker=(str(fake),))
    monkeypatch.setattr(trace, "ON", False)
    outer.run(Cmd(("true",)), timeout=10)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(trace, "ON", True)
    outer.run(Cmd(("printf", "%s", "x" * 100), env={"HF_TOKEN": "s3cret"}), timeout=10)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tune-remote trace: t+") and " ms  local/ctr: exec printf %s xxx" in line
    assert "s3cret" not in line and "x" * 41 not in line
