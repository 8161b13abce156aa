"""weir's run folder: private, one weir at a time, and found again by the next weir."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from weir.runfolder import RunFolderError, RunLock, default_run_dir, prepare, unix_socket_path


def test_prepare_makes_a_private_folder(tmp_path: Path) -> None:
    folder = prepare(tmp_path / "base" / "run")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder.parent).st_mode) == 0o700
    os.chmod(folder, 0o755)
    assert stat.S_IMODE(os.stat(prepare(folder)).st_mode) == 0o700  # tightened again


def test_prepare_refuses_a_symbolic_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunFolderError, match="not a folder"):
        prepare(tmp_path / "run")


def test_a_second_weir_on_the_same_folder_is_refused_while_the_first_lives(tmp_path: Path) -> None:
    folder = prepare(tmp_path / "run")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from weir.runfolder import RunLock
                RunLock({str(folder)!r}).acquire()
                print("held", flush=True)
                time.sleep(60)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderError, match=f"another weir \\(pid {holder.pid}\\)"):
            RunLock(folder).acquire()
    finally:
        holder.kill()  # SIGKILL: the kernel releases the lock
        holder.wait()
    lock = RunLock(folder)
    lock.acquire()
    lock.release()


def test_default_run_dir_is_per_admin_address_and_socket_paths_are_checked() -> None:
    assert default_run_dir("127.0.0.1", 9900).name == "127.0.0.1-9900"
    assert default_run_dir("127.0.0.1", 9900) != default_run_dir("127.0.0.1", 9901)
    with pytest.raises(ValueError, match="longer than 107 bytes"):
        unix_socket_path("/tmp/" + "x" * 120)
