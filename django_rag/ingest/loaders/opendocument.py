"""OpenDocument (ODT, ODS, ODP) and EPUB: zip packages of XML, read with defusedxml.

No format library is needed: the package is opened within the zip bounds (``package.py``) and
its XML parsed with defusedxml (no DTD, no entities). ODT headings (``text:h``) and EPUB
``<h1>``-``<h6>`` become heading lines; tables become rows that keep their headers; ODS sheets,
ODP slides and EPUB chapters number like pages (``page_unit`` "sheet", "slide", "chapter").
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from ...exceptions import FileRefusedError
from ...types import UNSAFE_FILE, RagDocument
from .base import clean_text
from .limits import loader_limits
from .package import Package, open_package
from .sniff import EPUB, ODP, ODS, ODT, sniff_content_type
from .structure import flow_document, heading, one_line, paged_document, table_lines

__all__ = ["load_epub", "load_odf"]

_NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "meta": "urn:oasis:names:tc:opendocument:xmlns:meta:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
    "opf": "http://www.idpf.org/2007/opf",
    "container": "urn:oasis:names:tc:opendocument:xmlns:container",
    "xhtml": "http://www.w3.org/1999/xhtml",
}


def _q(name: str) -> str:
    prefix, local = name.split(":")
    return f"{{{_NS[prefix]}}}{local}"


def _text(element: Any) -> str:
    return one_line("".join(element.itertext()))


class _Cells:
    """A countdown of the cells a file may give, shared by its sheets and tables."""

    def __init__(self, label: str) -> None:
        self.left = loader_limits().sheet_max_cells
        self.label = label

    def take(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise FileRefusedError(
                UNSAFE_FILE,
                f"{self.label} has more than {loader_limits().sheet_max_cells} cells "
                "(RAG['LOADERS']['SHEET_MAX_CELLS'])",
            )


def _odf_table(table: Any, cells: _Cells) -> list[str]:
    rows = []
    for row in table.iter(_q("table:table-row")):
        values: list[str] = []
        for cell in row:
            if cell.tag not in (_q("table:table-cell"), _q("table:covered-table-cell")):
                continue
            value = _text(cell)
            # A run of identical cells is stored once with a count; empty runs stay one cell.
            repeat = int(cell.get(_q("table:number-columns-repeated"), "1") or 1) if value else 1
            cells.take(repeat)
            values.extend([value] * repeat)
        while values and not values[-1]:
            values.pop()
        if values:
            rows.append(values)
    return table_lines(rows)


def _odf_blocks(element: Any, cells: _Cells) -> Iterator[str]:
    for child in element:
        if child.tag == _q("text:h"):
            yield heading(int(child.get(_q("text:outline-level"), "1") or 1), _text(child))
        elif child.tag == _q("text:p"):
            text = _text(child)
            if text:
                yield text
        elif child.tag == _q("text:list"):
            for item in child.iter(_q("text:list-item")):
                paragraphs = [_text(p) for p in item if p.tag in (_q("text:p"), _q("text:h"))]
                text = " ".join(p for p in paragraphs if p)
                if text:
                    yield f"- {text}"
        elif child.tag == _q("table:table"):
            yield "\n".join(_odf_table(child, cells))
        else:
            yield from _odf_blocks(child, cells)


def _odf_meta(package: Package) -> dict[str, Any]:
    if "meta.xml" not in package.names:
        return {}
    root = package.xml("meta.xml")
    title = root.find(f".//{_q('dc:title')}")
    author = root.find(f".//{_q('dc:creator')}")
    if author is None:
        author = root.find(f".//{_q('meta:initial-creator')}")
    return {
        "title": clean_text(_text(title)) if title is not None else None,
        "author": clean_text(_text(author)) if author is not None else None,
    }


def load_odf(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """An OpenDocument text (flowing, headings kept), spreadsheet (one page per sheet) or
    presentation (one page per slide)."""
    kind = sniff_content_type(data)
    label = f"OpenDocument {source_id!r}"
    cells = _Cells(label)
    with open_package(data, label) as package:
        derived = {
            "source": base_url or source_id,
            "loader": "odf",
            "content_type": kind,
            **_odf_meta(package),
        }
        body = package.xml("content.xml").find(_q("office:body"))
        if body is None:
            return []
        if kind == ODS:
            names, pages = [], []
            for sheet in body.iter(_q("table:table")):
                name = sheet.get(_q("table:name"), "") or ""
                names.append(name)
                lines = _odf_table(sheet, cells)
                pages.append("\n\n".join([heading(1, name), "\n".join(lines)]) if lines else "")
            return paged_document(source_id, pages, derived, metadata, tags, unit="sheet", names=names)
        if kind == ODP:
            pages = ["\n\n".join(_slide_blocks(slide, cells)) for slide in body.iter(_q("draw:page"))]
            return paged_document(source_id, pages, derived, metadata, tags, unit="slide")
        if kind != ODT:
            derived["content_type"] = ODT
        return flow_document(source_id, list(_odf_blocks(body, cells)), derived, metadata, tags)


def _slide_blocks(slide: Any, cells: _Cells) -> Iterator[str]:
    for frame in slide.iter(_q("draw:frame")):
        role = frame.get(_q("presentation:class"), "")
        if role == "title":
            yield heading(2, _text(frame))
        elif role not in ("page-number", "footer", "date-time", "header"):
            yield from _odf_blocks(frame, cells)


# --- EPUB ------------------------------------------------------------------------------------

_BLOCKS = {"p", "div", "li", "blockquote", "pre", "dd", "dt", "figcaption", "caption", "section"}
_SKIPPED = {"script", "style", "nav", "head"}


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def _xhtml_blocks(element: Any, cells: _Cells) -> Iterator[str]:
    for child in element:
        name = _local(child.tag)
        if name in _SKIPPED:
            continue
        if len(name) == 2 and name[0] == "h" and name[1] in "123456":
            yield heading(int(name[1]), _text(child))
        elif name == "table":
            rows = []
            for row in child.iter():
                if _local(row.tag) == "tr":
                    values = [_text(cell) for cell in row if _local(cell.tag) in ("td", "th")]
                    cells.take(len(values))
                    rows.append(values)
            yield "\n".join(table_lines(rows))
        elif name in _BLOCKS and not any(_local(c.tag) in _BLOCKS | {"table"} for c in child):
            text = _text(child)
            if text:
                yield f"- {text}" if name == "li" else text
        else:
            if child.text and child.text.strip() and name not in _BLOCKS:
                yield one_line(child.text)
            yield from _xhtml_blocks(child, cells)


def load_epub(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """An e-book: one page per chapter of the spine (``page_unit`` "chapter", their first
    headings in ``page_names``), title and author from the package's Dublin Core metadata."""
    label = f"EPUB {source_id!r}"
    cells = _Cells(label)
    with open_package(data, label) as package:
        container = package.xml("META-INF/container.xml")
        rootfile = container.find(f".//{_q('container:rootfile')}")
        if rootfile is None or not rootfile.get("full-path"):
            return []
        opf_path = rootfile.get("full-path", "")
        opf = package.xml(opf_path)
        base = posixpath.dirname(opf_path)
        title = opf.find(f".//{_q('dc:title')}")
        author = opf.find(f".//{_q('dc:creator')}")
        manifest = {
            item.get("id"): item.get("href", "")
            for item in opf.iter(_q("opf:item"))
            if "html" in (item.get("media-type") or "")
        }
        pages, names = [], []
        for itemref in opf.iter(_q("opf:itemref")):
            href = manifest.get(itemref.get("idref"))
            if not href:
                continue
            path = posixpath.normpath(posixpath.join(base, unquote(href.split("#", 1)[0])))
            if path not in package.names:
                continue
            body = package.xml(path).find(_q("xhtml:body"))
            blocks = list(_xhtml_blocks(body, cells)) if body is not None else []
            text = "\n\n".join(block for block in blocks if block)
            if not text.strip():
                continue  # a cover or a blank page is not a chapter
            pages.append(text)
            names.append(next((b.lstrip("#").strip() for b in blocks if b.startswith("#")), ""))
    derived = {
        "source": base_url or source_id,
        "loader": "epub",
        "content_type": EPUB,
        "title": clean_text(_text(title)) if title is not None else None,
        "author": clean_text(_text(author)) if author is not None else None,
    }
    return paged_document(source_id, pages, derived, metadata, tags, unit="chapter", names=names)
