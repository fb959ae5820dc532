"""Open files under the source root so that nothing outside it can be reached, by construction.

Checking a path and then opening it by name loses a race: a folder swapped
for a symlink between the two sends the open elsewhere. So the root is held
open as a directory descriptor, and every folder and file is opened from it
one name at a time with ``O_NOFOLLOW`` (``openat``): a component that is a
symlink when it is opened fails (``ELOOP``/``ENOTDIR``) instead of being
followed, whatever happened since the walk.

Links to files are still read when their target lies inside the root: the
target is resolved here, component by component from the root descriptor,
never by the kernel following a link; ``..`` above the root, or an absolute
target outside it, is "outside".

``read_regular`` is the same refusal for single files the agent reads by
name (the manifest, its ``.sig``): a FIFO, a device or a folder where a
file is expected is refused at once instead of hanging the command.
"""

from __future__ import annotations

import errno
import os
import stat

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
MAX_LINK_HOPS = 40


class NotRegular(OSError):
    """A name that is there but is not a regular file (FIFO, socket, device, folder, link)."""


class SourceRoot:
    """The source root, held open; opens below it never leave it."""

    def __init__(self, path: str | os.PathLike):
        self.real = os.path.realpath(path)
        self.fd = os.open(self.real, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)

    def __enter__(self) -> "SourceRoot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open_dir(self, parts) -> int:
        """A descriptor of the folder ``parts`` below the root (the caller closes it)."""
        fd = os.dup(self.fd)
        try:
            for name in parts:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def lstat(self, parts) -> os.stat_result:
        folder = self.open_dir(parts[:-1])
        try:
            return os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        finally:
            os.close(folder)

    def open_file(self, parts) -> int:
        """A read descriptor of the regular file ``parts``; ``NotRegular`` for anything else."""
        folder = self.open_dir(parts[:-1])
        try:
            fd = os.open(parts[-1], FILE_FLAGS, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink where the walk saw a file
                raise NotRegular(exc.errno, "not a regular file") from None
            raise
        finally:
            os.close(folder)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotRegular(errno.EINVAL, "not a regular file")
        return fd

    def resolve(self, parts) -> list[str] | None:
        """The real components of ``parts`` below the root, following links by hand; None if outside.

        Raises ``OSError`` when a component is missing or not a folder (a
        broken link) or when links loop.
        """
        done: list[str] = []
        pending = list(reversed(parts))
        hops = 0
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if not done:
                    return None
                done.pop()
                continue
            folder = self.open_dir(done)
            try:
                info = os.stat(name, dir_fd=folder, follow_symlinks=False)
                target = os.readlink(name, dir_fd=folder) if stat.S_ISLNK(info.st_mode) else None
            finally:
                os.close(folder)
            if target is None:
                done.append(name)
                continue
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise OSError(errno.ELOOP, "too many levels of links")
            if target.startswith("/"):
                inside = self._below_root(target)
                if inside is None:
                    return None
                done = []
                pending.extend(reversed(inside))
            else:
                pending.extend(reversed(target.split("/")))
        return done

    def _below_root(self, absolute: str) -> list[str] | None:
        """An absolute link target as components below the root, None when it is elsewhere."""
        for candidate in (os.path.normpath(absolute), os.path.realpath(absolute)):
            if candidate == self.real:
                return []
            prefix = self.real.rstrip("/") + "/"
            if candidate.startswith(prefix):
                return candidate[len(prefix):].split("/")
        return None


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the regular file ``path``, never following a final link
    and never blocking on a FIFO; ``NotRegular`` for anything but a regular file."""
    try:
        fd = os.open(path, FILE_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return _read_link_target(path, limit)
        raise
    return _read_fd(fd, limit)


def _read_link_target(path, limit: int) -> bytes:
    """A manifest may be a symlink (dotfiles repositories): open its target, but still not a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    return _read_fd(fd, limit)


def _read_fd(fd: int, limit: int) -> bytes:
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder")
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file (a FIFO, socket or device)")
        os.set_blocking(fd, True)
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
