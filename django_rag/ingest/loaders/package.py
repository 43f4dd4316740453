"""Zip packages (OOXML, ODF, EPUB) opened within ``RAG["LOADERS"]`` bounds, their XML read safely.

Before any library sees a package, its central directory is checked: the number of entries, the
bytes they declare once inflated, and the inflated/compressed ratio of each large entry. Python's
``zipfile`` stops inflating an entry at the size it declares (and fails its CRC if the data holds
more), so the declared sizes bound the memory and time of every later read, whichever library
reads it. XML parts must not carry a DTD (no OOXML, ODF or EPUB part needs one): entity expansion
("billion laughs") and external entities are refused before a parser sees them, and the
package's own XML is parsed with ``defusedxml``, which refuses them too.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...exceptions import FileRefusedError
from ...types import CORRUPT_FILE, ENCRYPTED, UNSAFE_FILE
from .limits import LoaderLimits, loader_limits

__all__ = ["Package", "open_package", "parse_xml"]

_RATIO_FLOOR = 1024 * 1024  # entries smaller than this are never a bomb, whatever their ratio
_PROLOG_BYTES = 64 * 1024
_DTD = re.compile(rb"<!(?:DOCTYPE|ENTITY)", re.I)
_ROOT = re.compile(rb"<[A-Za-z_]")


class Package:
    """A checked zip package: its entries by name, each read with its declared size as a bound."""

    def __init__(self, archive: zipfile.ZipFile, label: str) -> None:
        self.archive = archive
        self.label = label
        self.names = {info.filename for info in archive.infolist()}

    def read(self, name: str) -> bytes:
        """The bytes of entry ``name``; XML parts are checked for a DTD first."""
        try:
            data = self.archive.read(name)
        except KeyError as exc:
            raise FileRefusedError(CORRUPT_FILE, f"{self.label} has no entry {name!r}") from exc
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
            raise FileRefusedError(
                CORRUPT_FILE, f"{self.label}: entry {name!r} is unreadable: {exc}"
            ) from exc
        if _is_xml(name):
            refuse_dtd(data, f"{self.label}: {name}")
        return data

    def check_prolog(self, name: str) -> None:
        """Refuse entry ``name`` if its XML prolog declares a DTD; reads only its first bytes."""
        try:
            with self.archive.open(name) as entry:
                head = entry.read(_PROLOG_BYTES + 1)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
            raise FileRefusedError(
                CORRUPT_FILE, f"{self.label}: entry {name!r} is unreadable: {exc}"
            ) from exc
        refuse_dtd(head, f"{self.label}: {name}")

    def xml(self, name: str) -> Any:
        """Entry ``name`` parsed with defusedxml (an ``xml.etree.ElementTree.Element``)."""
        return parse_xml(self.read(name), f"{self.label}: {name}")


def _is_xml(name: str) -> bool:
    return name.lower().endswith((".xml", ".rels", ".opf", ".ncx", ".xhtml", ".htm", ".html"))


def refuse_dtd(data: bytes, label: str) -> None:
    """Refuse XML whose prolog declares a DTD or entities (the root element must start within
    ``_PROLOG_BYTES``; a DTD can only come before it)."""
    head = data[:_PROLOG_BYTES]
    root = None
    for match in _ROOT.finditer(head):
        root = match.start()
        break
    prolog = head if root is None else head[:root]
    if _DTD.search(prolog) or (root is None and len(data) > _PROLOG_BYTES):
        raise FileRefusedError(
            UNSAFE_FILE, f"{label} declares a DTD or entities (XML entity expansion is refused)"
        )


def parse_xml(data: bytes, label: str) -> Any:
    """``data`` parsed by defusedxml: no DTD, no entities, no external references."""
    try:
        from defusedxml import ElementTree
        from defusedxml.common import DefusedXmlException
    except ImportError as exc:  # pragma: no cover - every format extra installs it
        raise FileRefusedError(
            CORRUPT_FILE, "reading XML parts needs defusedxml: pip install defusedxml"
        ) from exc
    try:
        return ElementTree.fromstring(data, forbid_dtd=True)
    except DefusedXmlException as exc:
        raise FileRefusedError(UNSAFE_FILE, f"{label}: {exc}") from exc
    except ElementTree.ParseError as exc:
        raise FileRefusedError(CORRUPT_FILE, f"{label} is not well-formed XML: {exc}") from exc


def check_archive(archive: zipfile.ZipFile, label: str, limits: LoaderLimits) -> None:
    """Refuse a zip whose directory asks for more than the bounds (before anything is inflated)."""
    infos = archive.infolist()
    if len(infos) > limits.zip_max_entries:
        raise FileRefusedError(
            UNSAFE_FILE,
            f"{label} holds {len(infos)} entries; the limit is {limits.zip_max_entries} "
            "(RAG['LOADERS']['ZIP_MAX_ENTRIES'])",
        )
    total = 0
    for info in infos:
        if info.flag_bits & 0x1:
            raise FileRefusedError(ENCRYPTED, f"{label} is password-protected (entry {info.filename!r})")
        if info.file_size > _RATIO_FLOOR and info.file_size > limits.zip_max_ratio * max(
            info.compress_size, 1
        ):
            ratio = info.file_size // max(info.compress_size, 1)
            raise FileRefusedError(
                UNSAFE_FILE,
                f"{label}: entry {info.filename!r} inflates {ratio}x; the limit is {limits.zip_max_ratio}x "
                "(RAG['LOADERS']['ZIP_MAX_RATIO'])",
            )
        total += info.file_size
        if total > limits.zip_max_bytes:
            raise FileRefusedError(
                UNSAFE_FILE,
                f"{label} inflates to more than {limits.zip_max_bytes} bytes "
                "(RAG['LOADERS']['ZIP_MAX_BYTES'])",
            )


@contextmanager
def open_package(data: bytes, label: str) -> Iterator[Package]:
    """``data`` as a checked ``Package``; FileRefusedError for a bomb, a broken or encrypted zip."""
    limits = loader_limits()
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise FileRefusedError(CORRUPT_FILE, f"{label} is not a readable zip package: {exc}") from exc
    with archive:
        check_archive(archive, label, limits)
        yield Package(archive, label)


def checked_stream(data: bytes, label: str) -> io.BytesIO:
    """``data`` as a stream for a library that opens the zip itself, once the package passed the
    checks (bounds, encryption, and no DTD in any XML part)."""
    with open_package(data, label) as package:
        for name in sorted(package.names):
            if _is_xml(name):
                package.check_prolog(name)
    return io.BytesIO(data)
