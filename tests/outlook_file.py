"""An Outlook .msg file written byte by byte: an OLE compound file (MS-CFB, version 3) holding the
MAPI property streams of a message and its attachments (MS-OXMSG). No library writes this
format, so the test writes it; every stream is at least 4,096 bytes (strings padded with NULs, as
Outlook pads them), so all of them live in regular sectors and no mini stream is needed."""

from __future__ import annotations

import struct

SECTOR = 512
END, FREE, FAT_SECTOR = 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFD
CUTOFF = 4096


def utf16(text: str) -> bytes:
    data = text.encode("utf-16-le") + b"\x00\x00"
    return data + bytes(max(0, CUTOFF - len(data)))


def properties(filetime: int) -> bytes:
    """``__properties_version1.0`` of a top-level message: 32-byte header, then PidTagClientSubmitTime."""
    data = bytes(32) + struct.pack("<IIQ", 0x00390040, 2, filetime)
    return data + bytes(CUTOFF - len(data))


def msg_file(streams: dict[str, bytes], attachments: list[dict[str, bytes]]) -> bytes:
    """A .msg whose root holds ``streams`` and one ``__attach_version1.0_#n`` storage per attachment."""
    entries: list[dict[str, object]] = [{"name": "Root Entry", "type": 5, "children": []}]

    def add(parent: int, name: str, data: bytes | None) -> int:
        entries.append({"name": name, "type": 2 if data is not None else 1, "data": data, "children": []})
        index = len(entries) - 1
        children = entries[parent]["children"]
        assert isinstance(children, list)
        children.append(index)
        return index

    for name, data in streams.items():
        add(0, name, data)
    for number, attachment in enumerate(attachments):
        storage = add(0, f"__attach_version1.0_#{number:08X}", None)
        for name, data in attachment.items():
            add(storage, name, data)

    body = bytearray()
    fat: list[int] = []
    for entry in entries:
        data = entry.get("data")
        if not isinstance(data, bytes):
            entry["start"], entry["size"] = END, 0
            continue
        assert len(data) >= CUTOFF, f"{entry['name']}: a stream under {CUTOFF} bytes would need a mini stream"
        padded = data + bytes(-len(data) % SECTOR)
        first = len(fat)
        count = len(padded) // SECTOR
        fat += [first + n + 1 for n in range(count - 1)] + [END]
        entry["start"], entry["size"] = first, len(data)
        body += padded
    directory = bytearray()
    for index, entry in enumerate(entries):
        children = entry["children"]
        assert isinstance(children, list)
        # Siblings as a chain of right links: a valid (if unbalanced) red-black tree.
        right = FREE
        parent_children = next((e["children"] for e in entries if index in e["children"]), [])  # type: ignore[operator]
        if index in parent_children:
            position = parent_children.index(index)
            right = parent_children[position + 1] if position + 1 < len(parent_children) else FREE
        name = str(entry["name"]).encode("utf-16-le") + b"\x00\x00"
        directory += name.ljust(64, b"\x00") + struct.pack(
            "<HBBIII16sIQQIQ",
            len(name),
            int(entry["type"]),  # type: ignore[call-overload]
            1,
            FREE,
            right,
            children[0] if children else FREE,
            bytes(16),
            0,
            0,
            0,
            int(entry["start"]),  # type: ignore[call-overload]
            int(entry["size"]),  # type: ignore[call-overload]
        )
    directory += bytes(-len(directory) % SECTOR)
    directory_start = len(fat)
    directory_sectors = len(directory) // SECTOR
    fat += [directory_start + n + 1 for n in range(directory_sectors - 1)] + [END]
    fat_sectors = 1
    while (len(fat) + fat_sectors) > fat_sectors * (SECTOR // 4):
        fat_sectors += 1
    fat_start = len(fat)
    fat += [FAT_SECTOR] * fat_sectors
    fat += [FREE] * (fat_sectors * (SECTOR // 4) - len(fat))
    difat = [fat_start + n for n in range(fat_sectors)] + [FREE] * (109 - fat_sectors)
    header = struct.pack(
        "<8s16sHHHHH6sIIIIIIIII",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",
        bytes(16),
        0x3E,
        3,
        0xFFFE,
        9,
        6,
        bytes(6),
        0,
        fat_sectors,
        directory_start,
        0,
        CUTOFF,
        END,
        0,
        END,
        0,
    ) + struct.pack("<109I", *difat)
    return header + bytes(body) + bytes(directory) + struct.pack(f"<{len(fat)}I", *fat)
