"""The before arm's "module is current for the live table" check (issue 26), run by a real shell here:
current = the .so's mtime is newer than the table's ctime, so a table restored with ``cp -a`` (an old
mtime, a new ctime) or edited after the build is never taken for the one the module was built from."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from orchestrator.steps.prepare import copy_if_current


def _copied(tmp_path) -> bool:
    jit = tmp_path / "private"
    shutil.rmtree(jit, ignore_errors=True)
    jit.mkdir()
    line = copy_if_current(str(tmp_path / "live jit"), "module_x", str(tmp_path / "table.csv"), str(jit))
    subprocess.run(["sh", "-c", line], check=True)
    return (jit / "module_x.so").is_file()


def _setup(tmp_path):
    (tmp_path / "live jit").mkdir()
    table, so = tmp_path / "table.csv", tmp_path / "live jit" / "module_x.so"
    table.write_text("M,N,K\n1,2,3\n")
    past = time.time() - 100
    os.utime(table, (past, past))       # the mtime only: its ctime is now
    return table, so


def test_a_module_built_after_the_table_is_copied(tmp_path):
    table, so = _setup(tmp_path)
    so.write_text("built")
    future = time.time() + 5
    os.utime(so, (future, future))      # the build finished after the table's last change
    assert _copied(tmp_path)


def test_a_table_restored_with_an_old_mtime_is_not_taken_for_the_built_one(tmp_path):
    table, so = _setup(tmp_path)
    so.write_text("built")
    built = time.time() - 50
    os.utime(so, (built, built))        # mtime rule: .so (t-50) newer than the table (t-100) -> "current"
    assert so.stat().st_mtime > table.stat().st_mtime
    assert not _copied(tmp_path)        # but the table's inode changed after the build: built privately


def test_a_missing_module_is_not_copied(tmp_path):
    _setup(tmp_path)
    assert not _copied(tmp_path)


def test_paths_with_spaces_and_quotes_stay_one_word(tmp_path):
    d = tmp_path / "it's here"
    d.mkdir()
    table, so = _setup(d)
    so.write_text("built")
    future = time.time() + 5
    os.utime(so, (future, future))
    assert _copied(d)
