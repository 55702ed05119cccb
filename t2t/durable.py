"""Files that survive a kill, a full disk and a second writer.

- ``write_file(path, data)``: bytes written and fsynced, with the mode the user's umask asks for;
  ``write_error`` turns a failed write (disk full, ``ulimit -f``, read-only) into one
  :class:`~t2t.errors.T2TError` sentence.
- ``publish_folder(out, fill, what)``: a folder written whole beside ``out``, then renamed into place.
- ``append_line(path, line)``: one line appended; a failed write is cut off again, so the file never keeps
  half a line of ours.
- ``sha256_of`` and the ``checksums.sha256`` format of ``sha256sum`` (``sha256sum -c`` checks a checkpoint,
  or in a run folder the run's own copies of its vocabulary and modules).
- ``lock_output_dir(dir)``: one writer per run directory (``fcntl.flock``, which the kernel releases when the
  process ends, even by ``kill -9``); a second one stops with a sentence naming the holder's pid.

None of them writes through a symbolic link placed where a file of ours goes (a link ``RUN/.lock`` →
``~/precious.txt`` would have it overwritten with a pid): files are opened with ``O_NOFOLLOW``, so a link
where t2t writes in place (the lock, an appended log) is refused in one sentence naming it, and an atomic
write replaces the link itself, never what it points to.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Iterator

from t2t.errors import T2TError

try:
    import fcntl
except ImportError:  # Windows: no flock; runs there are not locked
    fcntl = None

LOCK_FILE = ".lock"
CHECKSUMS_FILE = "checksums.sha256"
_CHUNK = 1 << 24
NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)  # Windows has none (and no symbolic links an unprivileged user makes)

# Write failures the user can act on, and what to do about them.
_FIXES = {
    errno.ENOSPC: "free disk space",
    errno.EDQUOT: "free disk space (the quota is reached)",
    errno.EFBIG: "raise the file-size limit (ulimit -f)",
    errno.EROFS: "choose a writable folder",
    errno.EACCES: "choose a writable folder",
    errno.EPERM: "choose a writable folder",
    errno.EISDIR: "that path is a folder: give a file's path",
}


def write_error(e: OSError, what: str) -> T2TError:
    """One sentence for a failed write of ``what``: the system's reason and the fix."""
    if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
        return link_error(what)
    fix = _FIXES.get(e.errno, "check the disk and the file-size limit")
    return T2TError(f"cannot write {what} ({e.strerror or e}); {fix} and run the same command again (nothing "
                    f"already saved is lost).")


def link_error(path: str | os.PathLike) -> T2TError:
    """The sentence for a symbolic link found where t2t writes a file."""
    return T2TError(f"{path} is a symbolic link, and t2t never writes through a link placed where its files go "
                    f"(it would overwrite whatever the link points to); delete the link and run the same command "
                    f"again.")


def refuse_link(path: Path) -> None:
    """A file that t2t changes in place (cut back, appended to) must not be a link: see ``link_error``."""
    if Path(path).is_symlink():
        raise link_error(path)


def os_error_of(e: Exception) -> OSError | None:
    """The OSError behind a writer's exception (safetensors, in Rust, says "... (os error 27)")."""
    if isinstance(e, OSError):
        return e
    found = re.search(r"os error (\d+)", str(e))
    return OSError(int(found[1]), os.strerror(int(found[1]))) if found else None


def user_mode() -> int:
    """The mode a new file gets under the process's umask (0644 under the usual 022)."""
    mask = os.umask(0)  # reading the umask means setting it: put it back at once
    os.umask(mask)
    return 0o666 & ~mask


def no_follow_opener(path: str | os.PathLike, flags: int) -> int:
    """An ``opener`` for ``open()`` that refuses a link at ``path`` (an OSError ``write_error`` names)."""
    return os.open(path, flags | NO_FOLLOW, 0o666)


def write_file(path: Path, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` (a new or temporary name) and fsync it; a link at ``path`` is an OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NO_FOLLOW, 0o666)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """Unbuffered, so that a failure surfaces here and not again when the file is closed."""
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]


def fsync_file(path: Path) -> None:
    """Make a file another writer (a library) wrote durable before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY | NO_FOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (not supported everywhere: then a no-op)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to a temporary file beside ``path`` (fsynced, with the user's umask),
    then rename it over ``path``: a reader sees the old file or the new one, never half of one. A link at
    ``path`` is replaced, not written through; so is anything at the temporary name, which is ours."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink(missing_ok=True)
        write_file(tmp, data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(e, str(path)) from None


def publish_folder(out: Path, fill: Callable[[Path], None], what: str) -> Path:
    """Write a folder whole under a temporary name beside ``out`` (``fill(folder)`` writes its files), then
    give it the name ``out``: a failure (a full disk) leaves what was at ``out`` as it was, with ``what`` named
    in one sentence. An earlier folder at ``out`` is renamed aside first and deleted after, so a reader finds
    the earlier folder or the new one, each whole (only a kill between the two renames leaves neither at
    ``out``, and the earlier one as ``.old-<name>.<pid>`` beside it)."""
    new = out.with_name(f".tmp-{out.name}.{os.getpid()}")
    try:
        new.mkdir()  # the user's umask applies
        fill(new)
        fsync_dir(new)
        _swap_in(new, out)
    except BaseException as e:
        shutil.rmtree(new, ignore_errors=True)
        if isinstance(e, OSError):
            raise write_error(e, what) from None
        raise
    return out


def _swap_in(new: Path, out: Path) -> None:
    old = out.with_name(f".old-{out.name}.{os.getpid()}")
    had_one = out.exists()
    if had_one:
        os.replace(out, old)
    os.replace(new, out)
    fsync_dir(out.parent)
    if had_one:
        shutil.rmtree(old, ignore_errors=True)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` + newline; if that fails (OSError), the file is cut back to what it held before. A link at
    ``path`` is an OSError (``write_error`` says so)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NO_FOLLOW, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, (line + "\n").encode())
        except OSError:
            os.ftruncate(fd, size)  # shrinking works on a full disk and under ulimit -f
            raise
    finally:
        os.close(fd)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def format_checksums(checksums: dict[str, str]) -> str:
    """``sha256sum``'s format: ``<hex>  <name>`` per line."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(checksums.items()))


def parse_checksums(text: str) -> dict[str, str] | None:
    """{name: hex digest}, or None when ``text`` is not in ``sha256sum``'s format."""
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if not match:
            return None
        found[match[2]] = match[1]
    return found


@contextlib.contextmanager
def lock_output_dir(folder: Path) -> Iterator[None]:
    """Hold ``folder/.lock`` while the body runs; the folder is created (and checked writable) first."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise T2TError(f"output dir {folder} is a file; pass a folder as --output-dir.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | NO_FOLLOW, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise link_error(folder / LOCK_FILE) from None
        raise T2TError(f"cannot write to output dir {folder} ({e.strerror or e}); choose a writable "
                       f"--output-dir.") from None
    try:
        _take_lock(fd, folder)
        yield
    finally:
        os.close(fd)  # releases the flock


def _take_lock(fd: int, folder: Path) -> None:
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        raise T2TError(f"output dir {folder} is in use by another t2t-train (pid {holder}); wait for it to "
                       f"finish, stop it, or pass another --output-dir.") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as e:
        raise write_error(e, f"output dir {folder}") from None
