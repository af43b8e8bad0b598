"""fileio.write_atomic: whole files or none, the exact mode, and no way for someone who can
write into the folder to make the writer (often root) follow a symlink to another file."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hetero import fileio
from slurm_hetero.fileio import write_atomic, write_json_atomic


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[Path]:
    """A file outside the folder written to, that a planted symlink points at."""
    v = tmp_path / "victim"
    v.write_text("precious\n")
    v.chmod(0o600)
    yield v
    assert v.read_text() == "precious\n", "write_atomic wrote through a planted symlink"
    assert stat.S_IMODE(v.stat().st_mode) == 0o600, "write_atomic changed the mode of another file"


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_replaces_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    write_atomic(target, "one\n")
    write_atomic(target, b"two\n")
    assert target.read_text() == "two\n"
    assert leftovers(tmp_path) == []
    write_json_atomic(target, {"a": 1}, indent=1)
    assert target.read_text() == '{\n "a": 1\n}\n'


@pytest.mark.parametrize(("mode", "umask"), [(0o644, 0o077), (0o600, 0), (0o640, 0o022), (0o755, 0o777)])
def test_mode_is_exact_whatever_the_umask(tmp_path: Path, mode: int, umask: int) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    target.chmod(0o666)
    old = os.umask(umask)
    try:
        write_atomic(target, "x", mode=mode)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == mode


def test_planted_symlinks_at_every_predictable_name_are_not_followed(tmp_path: Path, victim: Path) -> None:
    """Whoever can write the folder plants links where an older writer put its temp file
    (the name with this pid, any pid) and at the name a fixed 'random' source would give."""
    folder = tmp_path / "shared"
    folder.mkdir()
    pids = {os.getpid(), *range(1, 300)}
    for name in [f".f.{pid}.tmp" for pid in pids] + [".f.tmp", "f.tmp", ".f.0.tmp"]:
        (folder / name).symlink_to(victim)
    write_atomic(folder / "f", "mine\n", mode=0o644)
    assert (folder / "f").read_text() == "mine\n"
    assert not (folder / "f").is_symlink()
    assert stat.S_IMODE((folder / "f").stat().st_mode) == 0o644


def test_a_guessed_random_name_is_not_followed(tmp_path: Path, victim: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Even if the attacker guesses the temp name (here: a fixed random source for the first
    tries), the writer never opens through the link: it picks another name."""
    calls = {"n": 0}
    real = os.urandom

    def urandom(n: int) -> bytes:
        calls["n"] += 1
        return b"\0" * n if calls["n"] <= 3 else real(n)

    monkeypatch.setattr(os, "urandom", urandom)
    guessed = fileio.temp_name("f", b"\0" * fileio.TOKEN_BYTES)
    (tmp_path / guessed).symlink_to(victim)
    write_atomic(tmp_path / "f", "mine\n")
    assert (tmp_path / "f").read_text() == "mine\n"
    assert (tmp_path / guessed).is_symlink()  # the planted link is left alone, not removed
    assert calls["n"] >= 4  # it retried with fresh names


def test_gives_up_when_every_name_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, victim: Path) -> None:
    monkeypatch.setattr(os, "urandom", lambda n: b"\1" * n)
    (tmp_path / fileio.temp_name("f", b"\1" * fileio.TOKEN_BYTES)).symlink_to(victim)
    with pytest.raises(FileExistsError):
        write_atomic(tmp_path / "f", "x")
    assert not (tmp_path / "f").exists()


def test_target_that_is_a_symlink_is_replaced_not_followed(tmp_path: Path, victim: Path) -> None:
    """os.replace renames over the link itself: the link goes, its target stays untouched."""
    link = tmp_path / "f"
    link.symlink_to(victim)
    write_atomic(link, "new\n")
    assert not link.is_symlink() and link.read_text() == "new\n"


def test_failure_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f"
    target.write_text("old\n")

    def broken_replace(*args: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert leftovers(tmp_path) == []


def test_write_failure_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f"
    target.write_text("old\n")

    def broken_write(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", broken_write)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new\n", sync=True)
    assert target.read_text() == "old\n"
    assert leftovers(tmp_path) == []


def test_interrupt_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "f", "x", sync=True)
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_or_a_file_as_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "nope" / "f", "x")
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        write_atomic(tmp_path / "file" / "f", "x")


def test_long_names_still_fit(tmp_path: Path) -> None:
    name = "n" * 255  # NAME_MAX: the temp name must not overflow it
    write_atomic(tmp_path / name, "x")
    assert (tmp_path / name).read_text() == "x"
    assert leftovers(tmp_path) == []


def test_relative_path_in_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_atomic("rel.txt", "x")
    assert (tmp_path / "rel.txt").read_text() == "x"


def test_concurrent_writers_never_show_half_a_file(tmp_path: Path) -> None:
    """Threads share a pid, so a pid-named temp file would be shared too: each writer must
    get its own, and a reader always sees one writer's whole content."""
    target = tmp_path / "f"
    payloads = [bytes([65 + i]) * 200_000 for i in range(8)]
    write_atomic(target, payloads[0])
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(data: bytes) -> None:
        try:
            for _ in range(25):
                write_atomic(target, data)
        except BaseException as e:  # reported below
            errors.append(e)

    def reader() -> None:
        while not stop.is_set():
            got = target.read_bytes()
            if got not in payloads:
                errors.append(AssertionError(f"torn read: {len(got)} bytes, {set(got)!r}"))
                return

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    assert errors == []
    assert target.read_bytes() in payloads
    assert leftovers(tmp_path) == []


def test_concurrent_processes(tmp_path: Path) -> None:
    target = tmp_path / "f"
    pids = []
    for i in range(4):
        pid = os.fork()
        if pid == 0:  # child: write, exit without running pytest's teardown
            code = 0
            try:
                for _ in range(30):
                    write_atomic(target, str(i) * 50_000)
            except BaseException:
                code = 1
            os._exit(code)
        pids.append(pid)
    for pid in pids:
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert target.read_text() in {str(i) * 50_000 for i in range(4)}
    assert leftovers(tmp_path) == []
