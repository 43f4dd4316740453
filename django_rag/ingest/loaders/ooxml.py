"""Word, Excel and PowerPoint files (DOCX, XLSX, PPTX) with python-docx, openpyxl and python-pptx.

The ``office`` extra installs them; each is imported when a file of its format is loaded. The
package is checked first (``package.checked_stream``: zip bounds, encryption, no DTD), then read
by its library. Headings become Markdown heading lines, tables rows that keep their headers,
slides and sheets number like pages (``page_unit`` "slide" or "sheet", sheets named in
``page_names``); title and author come from the file's core properties.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ...exceptions import ConfigurationError, FileRefusedError
from ...types import CORRUPT_FILE, UNSAFE_FILE, RagDocument
from .base import clean_text
from .limits import loader_limits
from .package import checked_stream
from .sniff import DOCX, PPTX, XLSX
from .structure import flow_document, heading, one_line, paged_document, table_lines

__all__ = ["load_docx", "load_pptx", "load_xlsx"]

INSTALL_HINT = 'loading {kind} files needs {package}: pip install "django-rag[office]"'


def _import(module: str, kind: str, package: str) -> Any:
    # The optional "office" extra: imported when a file of its format is loaded.
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(INSTALL_HINT.format(kind=kind, package=package)) from exc


def _properties(core: Any) -> dict[str, Any]:
    title = clean_text(getattr(core, "title", None) or "")
    author = clean_text(getattr(core, "author", None) or getattr(core, "creator", None) or "")
    return {"title": title or None, "author": author or None}


def _corrupt(label: str, exc: Exception) -> FileRefusedError:
    return FileRefusedError(CORRUPT_FILE, f"{label} cannot be read: {exc or type(exc).__name__}")


def load_docx(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """A Word document: paragraphs in order, "Heading N" styles as heading lines, tables as rows."""
    docx = _import("docx", "DOCX", "python-docx")
    label = f"DOCX {source_id!r}"
    stream = checked_stream(data, label)
    try:
        document = docx.Document(stream)
        blocks = list(_docx_blocks(document))
        derived = {"loader": "docx", "content_type": DOCX, **_properties(document.core_properties)}
    except FileRefusedError:
        raise
    except Exception as exc:
        raise _corrupt(label, exc) from exc
    return flow_document(source_id, blocks, {"source": base_url or source_id, **derived}, metadata, tags)


def _docx_blocks(document: Any) -> Iterator[str]:
    for item in document.iter_inner_content():
        if hasattr(item, "rows"):  # a table
            rows = ([cell.text for cell in row.cells] for row in item.rows)
            yield "\n".join(table_lines(rows))
            continue
        text = item.text
        if not text.strip():
            continue
        style = (item.style.name if item.style is not None else "") or ""
        if style == "Title":
            yield heading(1, text)
        elif style.startswith("Heading") and style[7:].strip().isdigit():
            yield heading(int(style[7:]), text)
        elif style.startswith("List"):
            yield f"- {one_line(text)}"
        else:
            yield text


def load_xlsx(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """A workbook: one page per sheet (``page_unit`` "sheet", names in ``page_names``), each a
    heading with the sheet's name and one line per row after its column headers."""
    openpyxl = _import("openpyxl", "XLSX", "openpyxl")
    label = f"XLSX {source_id!r}"
    stream = checked_stream(data, label)
    budget = loader_limits().sheet_max_cells
    names: list[str] = []
    pages: list[str] = []
    try:
        workbook = openpyxl.load_workbook(stream, read_only=True, data_only=True)
        try:
            for sheet in workbook.worksheets:
                rows = []
                for row in sheet.iter_rows(values_only=True):
                    budget -= len(row)
                    if budget < 0:
                        raise FileRefusedError(
                            UNSAFE_FILE,
                            f"{label} has more than {loader_limits().sheet_max_cells} cells "
                            "(RAG['LOADERS']['SHEET_MAX_CELLS'])",
                        )
                    rows.append(row)
                names.append(str(sheet.title))
                lines = table_lines(rows)
                pages.append("\n\n".join([heading(1, str(sheet.title)), "\n".join(lines)]) if lines else "")
            derived = {"loader": "xlsx", "content_type": XLSX, **_properties(workbook.properties)}
        finally:
            workbook.close()
    except FileRefusedError:
        raise
    except Exception as exc:
        raise _corrupt(label, exc) from exc
    derived["source"] = base_url or source_id
    return paged_document(source_id, pages, derived, metadata, tags, unit="sheet", names=names)


def load_pptx(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """A slide deck: one page per slide (``page_unit`` "slide"), its title a heading line, then
    the text of its shapes in order, its tables as rows, and its speaker notes."""
    pptx = _import("pptx", "PPTX", "python-pptx")
    label = f"PPTX {source_id!r}"
    stream = checked_stream(data, label)
    pages = []
    try:
        presentation = pptx.Presentation(stream)
        for slide in presentation.slides:
            pages.append("\n\n".join(_slide_blocks(slide)))
        derived = {"loader": "pptx", "content_type": PPTX, **_properties(presentation.core_properties)}
    except FileRefusedError:
        raise
    except Exception as exc:
        raise _corrupt(label, exc) from exc
    derived["source"] = base_url or source_id
    return paged_document(source_id, pages, derived, metadata, tags, unit="slide")


def _slide_blocks(slide: Any) -> Iterator[str]:
    title_shape = slide.shapes.title
    if title_shape is not None and title_shape.has_text_frame and title_shape.text_frame.text.strip():
        yield heading(2, title_shape.text_frame.text)
    for shape in _shapes(slide.shapes):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        if getattr(shape, "has_table", False):
            rows = ([cell.text for cell in row.cells] for row in shape.table.rows)
            yield "\n".join(table_lines(rows))
        elif getattr(shape, "has_text_frame", False) and shape.text_frame.text.strip():
            yield shape.text_frame.text
    if slide.has_notes_slide:
        notes = slide.notes_slide.notes_text_frame
        if notes is not None and notes.text.strip():
            yield f"Notes: {notes.text}"


def _shapes(shapes: Any) -> Iterator[Any]:
    for shape in shapes:
        if hasattr(shape, "shapes"):  # a group: its members, in order
            yield from _shapes(shape.shapes)
        else:
            yield shape
