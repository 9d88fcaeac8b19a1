"""A writer of "newc" cpio archives, the format the kernel unpacks as its initramfs.

Own code because the host has no cpio tool and the format is a fixed 110-byte ASCII header per
entry (linux/Documentation/driver-api/early-userspace/buffer-format.rst). Several archives
concatenated form one initramfs: the kernel unpacks them in order, later entries replacing
earlier ones, which is how a run's files are added to the cached base.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

TRAILER = "TRAILER!!!"


class CpioWriter:
    """Append entries to an open binary file; close() writes the trailer."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", *, uid: int = 0, gid: int = 0,
               mtime: int = 0, nlink: int = 1, rdev: tuple[int, int] = (0, 0)) -> None:
        name_b = name.encode() + b"\0"
        fields = [self.ino, mode, uid, gid, nlink, mtime, len(data), 0, 0, rdev[0], rdev[1],
                  len(name_b), 0]
        self.ino += 1
        head = b"070701" + b"".join(b"%08X" % v for v in fields)
        self.f.write(head + name_b + b"\0" * ((-(len(head) + len(name_b))) % 4))
        self.f.write(data + b"\0" * ((-len(data)) % 4))

    def directory(self, name: str, mode: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | mode, nlink=2)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def char_device(self, name: str, major: int, minor: int, mode: int = 0o600) -> None:
        self._entry(name, stat.S_IFCHR | mode, rdev=(major, minor))

    def path(self, name: str, src: str) -> None:
        """One file system object (file, directory, symlink, device) as `name`."""
        st = os.lstat(src)
        kw = dict(uid=st.st_uid, gid=st.st_gid, mtime=int(st.st_mtime))
        if stat.S_ISLNK(st.st_mode):
            self._entry(name, st.st_mode, os.readlink(src).encode(), **kw)
        elif stat.S_ISREG(st.st_mode):
            with open(src, "rb") as f:
                self._entry(name, st.st_mode, f.read(), **kw)
        elif stat.S_ISDIR(st.st_mode):
            self._entry(name, st.st_mode, nlink=2, **kw)
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            self._entry(name, st.st_mode, rdev=(os.major(st.st_rdev), os.minor(st.st_rdev)), **kw)
        # sockets and fifos are not needed in a root file system image

    def tree(self, root: str, prefix: str = "", skip: tuple[str, ...] = ()) -> None:
        """Every object under root (root itself excluded), named prefix/relative path.
        Directories in `skip` (relative paths) are written empty."""
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            rel = "" if rel == "." else rel
            if rel in skip:
                dirnames[:] = []
                continue
            for n in sorted(dirnames) + sorted(filenames):
                relname = os.path.join(rel, n)
                self.path(os.path.join(prefix, relname).lstrip("/"), os.path.join(dirpath, n))
            dirnames.sort()

    def close(self) -> None:
        self._entry(TRAILER, 0, nlink=1)
        self.f.write(b"\0" * ((-self.f.tell()) % 512))
