"""Folders into files with stable ids: paths relative to a root, excludes, symlink loops caught.

A file's source id is its path relative to the root (``rag_ingest --root``, default the current
directory), in POSIX form, however the file was named on the command line (``./docs/a.md``,
``docs/../docs/a.md`` and ``/srv/site/docs/a.md`` from ``/srv/site`` are all ``docs/a.md``).
Dot files and dot folders are never walked. A symbolic link is followed only while it resolves
inside the folder walked (a path given alone: inside the root); one that leads out is reported as
``symlink-outside`` and not read, unless ``follow_links`` (``rag_ingest --follow-links``): whoever
can write into the folder must not be able to publish any file the ingest process can read. A
link that leads to a folder already walked (a loop) or to itself is reported, not followed.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..exceptions import ConfigurationError
from ..types import SYMLINK_LOOP, SYMLINK_OUTSIDE, UNREADABLE

__all__ = ["Found", "escapes", "excluded", "source_id_for", "walk"]


@dataclass(frozen=True)
class Found:
    """A file to load, or (``reason`` set) a path that cannot be walked and why."""

    path: str  # absolute, not resolved: the path as walked
    source_id: str
    reason: str = ""
    error: str = ""


def source_id_for(path: str | Path, root: str | Path) -> str:
    """``path`` relative to ``root`` (both made absolute, ``..`` folded), or ConfigurationError."""
    absolute, base = os.path.abspath(path), os.path.abspath(root)
    relative = os.path.relpath(absolute, base)
    if relative == os.curdir:
        return ""
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        raise ConfigurationError(
            f"{absolute} is outside --root {base}: source ids are paths relative to the root, so "
            "pass a --root that holds every path given (e.g. --root /)"
        )
    return Path(relative).as_posix()


def excluded(source_id: str, patterns: Iterable[str]) -> bool:
    """Whether a ``--exclude`` glob matches the id, or the name of the file or folder alone."""
    name = source_id.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(source_id, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def escapes(path: str | Path, bound: str | Path) -> str:
    """Why ``path`` is read from outside ``bound`` once its links are resolved, or "" if it is not."""
    target, home = os.path.realpath(path), os.path.realpath(bound)
    if target == home or target.startswith(home.rstrip(os.sep) + os.sep):
        return ""
    return f"a symbolic link to {target}, outside {home}; --follow-links (follow_links=True) follows it"


def walk(
    folder: str | Path, root: str | Path, excludes: Iterable[str] = (), *, follow_links: bool = False
) -> Iterator[Found]:
    """Every file under ``folder``, sorted depth first, with what could not be walked on the way.

    Links that resolve outside ``folder`` (and a ``folder`` that resolves outside ``root``) come
    as ``symlink-outside`` unless ``follow_links``.
    """
    patterns = tuple(excludes)
    start = os.path.abspath(folder)
    outside = "" if follow_links else escapes(start, root)
    if outside:
        yield Found(start, source_id_for(start, root), SYMLINK_OUTSIDE, outside)
        return
    try:
        first = os.stat(start)
    except OSError as exc:
        yield Found(start, source_id_for(start, root), UNREADABLE, f"cannot read folder: {exc.strerror}")
        return
    visited = {(first.st_dev, first.st_ino)}
    stack = [start]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as exc:
            sid = source_id_for(directory, root)
            yield Found(directory, sid, UNREADABLE, f"cannot list folder: {exc.strerror}")
            continue
        folders: list[str] = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            sid = source_id_for(entry.path, root)
            if excluded(sid, patterns):
                continue
            # Only a link can lead out: every folder entered so far resolves inside ``start``.
            outside = "" if follow_links or not entry.is_symlink() else escapes(entry.path, start)
            if outside:
                yield Found(entry.path, sid, SYMLINK_OUTSIDE, outside)
                continue
            try:
                info = os.stat(entry.path)  # follows symbolic links
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    yield Found(entry.path, sid, SYMLINK_LOOP, f"symbolic link loop: {exc.strerror}")
                else:
                    yield Found(entry.path, sid, UNREADABLE, f"cannot read: {exc.strerror}")
                continue
            if stat.S_ISDIR(info.st_mode):
                key = (info.st_dev, info.st_ino)
                if key in visited:
                    target = os.path.realpath(entry.path)
                    yield Found(entry.path, sid, SYMLINK_LOOP, f"leads back to {target}, already walked")
                    continue
                visited.add(key)
                folders.append(entry.path)
            else:
                yield Found(entry.path, sid)
        stack.extend(reversed(folders))
