"""A file's content type from its bytes, not from its name or the type it was declared with.

A name or a declared type is a hint: it decides between text types that bytes cannot tell apart
(CSV, Markdown, plain text), and nothing else. A PDF named ``report.html`` is a PDF, a Word file
named ``notes.txt`` is a Word file, HTML named ``scan.pdf`` is HTML.
"""

from __future__ import annotations

import io
import re
import zipfile

__all__ = ["TEXT_TYPES", "ZIP_TYPES", "describe", "sniff_content_type"]

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ODT = "application/vnd.oasis.opendocument.text"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
ODP = "application/vnd.oasis.opendocument.presentation"
EPUB = "application/epub+zip"
MSG = "application/vnd.ms-outlook"
EML = "message/rfc822"
RTF = "application/rtf"
ZIP = "application/zip"
# An OLE compound file holding an encrypted OOXML package (what Office writes for a password).
ENCRYPTED_OFFICE = "application/x-encrypted-office"
OLE = "application/x-ole-storage"  # legacy .doc/.xls/.ppt and other compound files
BINARY = "application/octet-stream"

# Types stored as zip packages, told apart by the entries they hold.
ZIP_TYPES = frozenset({DOCX, XLSX, PPTX, ODT, ODS, ODP, EPUB})
# Types whose bytes are text: the name or the declared type picks among them.
TEXT_TYPES = frozenset(
    {
        "text/plain",
        "text/markdown",
        "text/x-markdown",
        "text/csv",
        "text/tab-separated-values",
        "text/html",
        "application/xhtml+xml",
        EML,
    }
)

# fmt: off
_MAGIC = (
    (b"\x89PNG", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"{\\rtf", RTF),
    (b"\x1f\x8b", "application/gzip"),
    (b"\x7fELF", "application/x-executable"),
    (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
    (b"Rar!", "application/vnd.rar"),
)
# fmt: on
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_NAMES = {
    "application/pdf": "a PDF",
    "image/png": "a PNG image",
    "image/jpeg": "a JPEG image",
    "image/gif": "a GIF image",
    "image/tiff": "a TIFF image",
    "image/webp": "a WebP image",
    ZIP: "a zip archive",
    "application/gzip": "gzip data",
    "application/x-executable": "an executable",
    OLE: "an OLE compound file (a legacy Office file)",
    ENCRYPTED_OFFICE: "a password-protected Office file",
    BINARY: "NUL bytes (binary data)",
}
_HTML_START = re.compile(rb"\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)[\s>]", re.I | re.S)
_HEADER_LINE = re.compile(rb"[A-Za-z][A-Za-z0-9-]{0,76}:[ \t]")
_MAIL_HEADERS = frozenset(
    {b"from", b"to", b"subject", b"date", b"received", b"message-id", b"mime-version", b"return-path"}
)


def describe(content_type: str) -> str:
    """What a binary type is, in words, for a skip reason ("a PNG image")."""
    return _NAMES.get(content_type, content_type)


def sniff_content_type(data: bytes, declared: str | None = None) -> str:
    """The type of ``data``; ``declared`` (a name's or a header's type) only picks among text types.

    Returns ``application/octet-stream`` for binary data it does not know.
    """
    hint = (declared or "").split(";", 1)[0].strip().lower()
    head = data[:8192]
    if b"%PDF-" in head[:1024]:
        return PDF
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(OLE_MAGIC):
        return _ole_kind(data)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_kind(data)
    for magic, content_type in _MAGIC:
        if head.startswith(magic):
            return content_type
    if b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return BINARY
    return _text_kind(head, hint)


def _text_kind(head: bytes, hint: str) -> str:
    body = head.lstrip(b"\xef\xbb\xbf")
    looks_html = _HTML_START.match(body) is not None
    if hint in TEXT_TYPES:
        if hint == EML and not _looks_like_mail(body):
            return "text/plain"
        # A page saved as .txt is still read as text (its markup shows): the name asked for that.
        return hint
    if looks_html:
        return "text/html"
    if _looks_like_mail(body):
        return EML
    return "text/markdown" if hint in ("text/markdown", "text/x-markdown") else "text/plain"


def _looks_like_mail(head: bytes) -> bool:
    """RFC 822 headers: the first lines are ``Name: value`` and some of the names are mail's own."""
    names = set()
    for line in head.split(b"\n", 40)[:40]:
        line = line.rstrip(b"\r")
        if not line:
            break
        if line[:1] in (b" ", b"\t"):
            continue
        if not _HEADER_LINE.match(line):
            return False
        names.add(line.split(b":", 1)[0].lower())
    return len(names & _MAIL_HEADERS) >= 2


def _zip_kind(data: bytes) -> str:
    """OOXML, ODF and EPUB are zip files told apart by what they hold; reading the central
    directory costs nothing here (nothing is inflated)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist()[:20_000])
            if "mimetype" in names:
                info = archive.getinfo("mimetype")
                if info.file_size < 200:
                    kind = archive.read(info).decode("ascii", "replace").strip()
                    if kind in (ODT, ODS, ODP, EPUB):
                        return kind
            if "[Content_Types].xml" in names:
                if "word/document.xml" in names:
                    return DOCX
                if "xl/workbook.xml" in names:
                    return XLSX
                if "ppt/presentation.xml" in names:
                    return PPTX
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, NotImplementedError, RuntimeError):
        pass
    return ZIP


def _ole_kind(data: bytes) -> str:
    """OLE compound files: directory entries are UTF-16 names, found without parsing the file."""
    if "EncryptedPackage".encode("utf-16-le") in data:
        return ENCRYPTED_OFFICE
    if "__substg1.0_".encode("utf-16-le") in data:
        return MSG
    return OLE
