"""dist/ is a folder that is served while it is rebuilt: claim a staging folder beside it, sweep what killed builds
left, and swap the finished build in without a moment when dist/ is missing.

An index server or pip (``file://``) may read dist/ at any time, so:

* builds into the same dist/ take turns: each holds an ``flock`` on ``.<dist>.lock`` from start to end;
* each build holds an ``flock`` on ``.<dist>.partial-<id>.lock`` for its whole life, so the next build can tell the
  staging folder of a killed build (swept) from that of a running one (left alone);
* the swap is one ``renameat2(RENAME_EXCHANGE)`` on Linux; elsewhere two renames, the first undone when the second
  fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import DistError


@contextlib.contextmanager
def exclusive(dist: Path, log: Callable[[str], object]) -> Iterator[None]:
    """Hold the lock of ``dist``: a second build into the same folder waits for the first (and then sees its
    result as the previous build) instead of racing it."""
    fd = os.open(dist.with_name(f".{dist.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build into {dist} to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (the lock file stays: removing it would let a waiter and a newcomer lock different files)


# Staging folders, their locks, and the sweep of what killed builds left. A build with id X owns
# .<dist>.partial-X (staging), .<dist>.old-X (the previous dist/ during a two-rename swap) and the lock file
# .<dist>.partial-X.lock; it holds an exclusive flock on that file from before the folder exists until after both
# folders are gone. The kernel drops the lock when the process dies, however it dies.


def leftover(dist: Path, kind: str, build_id: str, suffix: str = "") -> Path:
    return dist.with_name(f".{dist.name}.{kind}-{build_id}{suffix}")


def _build_id(dist: Path, path: Path) -> str | None:
    for kind in ("partial", "old"):
        prefix = f".{dist.name}.{kind}-"
        if path.name.startswith(prefix) and len(path.name) > len(prefix):
            build_id = path.name[len(prefix) :]
            return build_id.removesuffix(".lock") if kind == "partial" else build_id
    return None


def still_linked(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file open as ``fd``: a sweeper may have unlinked it before we locked it."""
    try:
        st, fst = path.stat(), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def locked_tempfile(folder: Path, prefix: str, suffix: str = "") -> tuple[int, str]:
    """A new file in ``folder`` with its exclusive lock held: (fd, path). A sweeper removes such files only when
    it can take their lock, so one it unlinked between our mkstemp and flock is given up for another name."""
    while True:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a sweeper looks at it, a moment
        if still_linked(fd, Path(name)):
            return fd, name
        os.close(fd)


def claim(dist: Path) -> tuple[str, int]:
    """Make this build's staging folder, its lock held first: (build id, locked fd of the lock file)."""
    prefix = f".{dist.name}.partial-"
    fd, name = locked_tempfile(dist.parent, prefix, ".lock")
    build_id = Path(name).name[len(prefix) : -len(".lock")]
    staging = leftover(dist, "partial", build_id)
    shutil.rmtree(staging, ignore_errors=True)  # a killed build's folder under the same id: ours now, stale
    staging.mkdir()
    staging.chmod(0o755)  # dist/ is meant to be served
    return build_id, fd


def sweep(dist: Path, log) -> None:
    """Remove the staging folders and old trees of builds that died (kill -9, power loss) beside dist/; those of
    running builds hold their lock and are left alone.

    An old tree and no dist/ may be the previous dist/ of a two-rename swap cut between its renames, or a folder
    anyone who can write beside dist/ planted there (with a changed wheel and a build.json to match): nothing here
    tells them apart, so it is never moved into place. Only the build that moved dist/ aside moves it
    back (:func:`publish`); after a cut swap the next build starts without a previous dist/."""
    ids = sorted({i for p in dist.parent.iterdir() if (i := _build_id(dist, p)) is not None})
    for build_id in ids:
        lock = leftover(dist, "partial", build_id, ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a running build
            if not still_linked(fd, lock):
                continue  # another build swept it meanwhile
            old = leftover(dist, "old", build_id)
            cut_swap = old.is_dir() and not dist.exists()
            for folder in (leftover(dist, "partial", build_id), old):
                if folder.is_dir() and not folder.is_symlink():
                    shutil.rmtree(folder, ignore_errors=True)
                    log(
                        f"removed {folder}, left by a build that was stopped while it swapped dist/: not restored, "
                        "as a build cannot tell it from a planted folder (build the lines it held again)"
                        if folder == old and cut_swap
                        else f"removed {folder}, left by a build that was stopped"
                    )
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)


# The swap.

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


@functools.cache
def _renameat2():
    """libc's renameat2 (glibc 2.28+, musl 1.2.2+), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step. False where the system or the filesystem cannot (nothing was changed then);
    OSError for any other failure."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def swap_in(staging: Path, dist: Path, old: Path) -> None:
    """Put the finished staging folder in place of dist/.

    Readers of dist/ must never find it missing (an index server would answer 404), so an existing dist/ is
    exchanged with staging in one renameat2 step; the previous tree is then at the staging path, for the caller to
    remove. Without renameat2 it takes two renames, and a failure of the second moves the previous tree back.
    """
    not_moved = "dist/ was left as it was"
    hint = "check that the folder is writable and its filesystem has room, then build again"
    try:
        if not dist.exists():
            os.replace(staging, dist)
            return
        if _exchange(staging, dist):
            return
        os.replace(dist, old)
    except OSError as exc:
        raise DistError(f"cannot move the new build into {dist}: {exc.strerror or exc}; {not_moved}", hint) from exc
    try:
        os.replace(staging, dist)
    except OSError as exc:
        try:
            os.replace(old, dist)
        except OSError:
            raise DistError(
                f"cannot move the new build into {dist} ({exc.strerror or exc}), nor the "
                f"previous one back: it is in {old}",
                f"move {old} back to {dist} (the next build does it too)",
            ) from exc
        raise DistError(f"cannot move the new build into {dist}: {exc.strerror or exc}; {not_moved}", hint) from exc
    shutil.rmtree(old, ignore_errors=True)
