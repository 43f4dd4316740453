"""Hostile office packages and images, built byte by byte: shared by tests/test_formats_hostile.py
and bench/loader_throughput.py --bombs (no Django model imported here)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable

import docx
from PIL import Image

MB = 1024 * 1024
BILLION_LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + b"".join(
        b'<!ENTITY lol%d "%s">' % (n, (b"&lol%d;" % (n - 1) if n > 1 else b"&lol;") * 10)
        for n in range(1, 10)
    )
    + b']><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"
)
EXTERNAL_ENTITY = (
    b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>&xxe;</w:t></w:r></w:p></w:body></w:document>"
)


def docx_bytes(text: str = "Backups run nightly.") -> bytes:
    document = docx.Document()
    document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def rewritten(
    package: bytes, replace: dict[str, bytes], add: Callable[[zipfile.ZipFile], None] | None = None
) -> bytes:
    """``package`` with some entries' bytes replaced, and more written by ``add``."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(package)) as source,
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out,
    ):
        for info in source.infolist():
            out.writestr(info.filename, replace.get(info.filename, source.read(info)))
        if add is not None:
            add(out)
    return buffer.getvalue()


def zip_bomb_docx(megabytes: int = 300) -> bytes:
    """A real DOCX plus one entry of ``megabytes`` MB of zeros (about 300 KB compressed)."""

    def add(out: zipfile.ZipFile) -> None:
        with out.open("word/media/zeros.bin", "w", force_zip64=True) as entry:
            block = bytes(MB)
            for _ in range(megabytes):
                entry.write(block)

    return rewritten(docx_bytes(), {}, add)


def many_entries_docx(count: int) -> bytes:
    return rewritten(
        docx_bytes(), {}, lambda out: [out.writestr(f"customXml/n{i}.bin", b"x") for i in range(count)]
    )


def png_claiming(width: int, height: int) -> bytes:
    """A 1x1 PNG whose header claims ``width`` x ``height`` pixels (CRC fixed, so it parses)."""
    buffer = io.BytesIO()
    Image.new("L", (1, 1), 255).save(buffer, format="PNG")
    data = bytearray(buffer.getvalue())
    header = b"IHDR" + struct.pack(">II", width, height) + bytes(data[24:29])
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(header))
    return bytes(data)


def encrypted_office() -> bytes:
    return b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512) + "EncryptedPackage".encode("utf-16-le")


def lying_sizes(package: bytes, name: str, size: int) -> bytes:
    """``package`` with entry ``name`` declaring ``size`` inflated bytes in both its headers."""
    data = bytearray(package)
    encoded = name.encode()
    local = data.find(b"PK\x03\x04")
    while local != -1:
        name_length = struct.unpack_from("<H", data, local + 26)[0]
        if data[local + 30 : local + 30 + name_length] == encoded:
            struct.pack_into("<I", data, local + 22, size)
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.find(b"PK\x01\x02")
    while central != -1:
        name_length = struct.unpack_from("<H", data, central + 28)[0]
        if data[central + 46 : central + 46 + name_length] == encoded:
            struct.pack_into("<I", data, central + 24, size)
        central = data.find(b"PK\x01\x02", central + 4)
    return bytes(data)
