"""OCR: a scanned PDF page and a photographed paragraph, read by Tesseract, found by a search for
a phrase of their text, citing the right page; the Document says ``ocr``."""

from __future__ import annotations

import io
import random
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.files.base import ContentFile
from django.core.management import call_command
from PIL import Image, ImageDraw, ImageFilter, ImageFont

import django_rag as rag
from django_rag.exceptions import FileRefusedError
from django_rag.ingest.loaders import load_bytes
from django_rag.ingest.rows import document_for
from django_rag.models import Document
from tests.mediaapp.models import Upload

FIRE = (
    "In case of fire leave the building by the nearest stairs and gather at the assembly point "
    "in the car park behind building C, where the warden counts everyone."
)
KEYS = "The boiler room key hangs in the locked cabinet beside the reception desk on the ground floor."
PHOTO = (
    "Visitors must wear a yellow badge at all times and return it to the security desk before "
    "they leave the campus in the evening."
)
OCR_ON = {"ENABLED": True, "LANGUAGES": "eng+por"}


def page_image(text: str, width: int = 1400) -> Image.Image:
    """``text`` typeset black on white, as a scanner would see a printed page."""
    font = ImageFont.load_default(size=34)
    lines = textwrap.wrap(text, width=60)
    image = Image.new("L", (width, 140 + 52 * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(lines):
        draw.text((70, 70 + 52 * number), line, font=font, fill=0)
    return image


def photographed(text: str) -> bytes:
    """``text`` as a phone photo of a page: tilted, grainy, a little blurred, JPEG-compressed."""
    image = page_image(text).rotate(2.5, expand=True, fillcolor=255, resample=Image.Resampling.BICUBIC)
    # Grain from a seeded generator, so every run reads the same photo.
    grain = random.Random(7).randbytes(image.size[0] * image.size[1])
    noise = Image.frombytes("L", image.size, grain)
    image = Image.blend(image, noise, 0.18).filter(ImageFilter.GaussianBlur(0.8))
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=70)
    return buffer.getvalue()


def scanned_pdf(*texts: str) -> bytes:
    """A PDF whose pages are only images of ``texts`` (no text layer), as a scanner makes it."""
    images = [page_image(text).convert("RGB") for text in texts]
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", resolution=150, save_all=True, append_images=images[1:])
    return buffer.getvalue()


@pytest.fixture
def ocr_on(settings: Any) -> None:
    assert shutil.which("tesseract"), ".ci/run installs tesseract-ocr"
    settings.RAG = {**settings.RAG, "OCR": OCR_ON}


@pytest.mark.django_db
def test_a_scanned_pdf_page_is_found_by_a_phrase_and_cited_at_its_page(ocr_on: None, tmp_path: Path) -> None:
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "safety.pdf").write_bytes(scanned_pdf(KEYS, FIRE))
    call_command("rag_ingest", str(tmp_path / "kb"), root=str(tmp_path), stdout=io.StringIO())
    document = Document.objects.get(source_id="kb/safety.pdf")
    assert (document.status, document.status_reason, document.page_count) == ("indexed", "ocr", 2)
    assert document.metadata["ocr_pages"] == [1, 2]
    [hit, *_] = rag.collection("docs").search("assembly point in the car park", mode="text")
    assert (hit.source_id, hit.page) == ("kb/safety.pdf", 2)
    [hit, *_] = rag.collection("docs").search("boiler room key", mode="text")
    assert (hit.source_id, hit.page) == ("kb/safety.pdf", 1)


@pytest.mark.django_db
def test_a_photographed_paragraph_uploaded_to_a_registered_model_is_found(
    ocr_on: None, committed: Any
) -> None:
    # Named .txt and declared nothing useful: the bytes say JPEG, so it is read by OCR.
    with committed():
        row = Upload.objects.create(file=ContentFile(photographed(PHOTO), name="IMG_2041.txt"))
    document = document_for(row)
    assert (document.status, document.status_reason) == ("indexed", "ocr")
    assert document.content_type == "image/jpeg"
    [hit, *_] = rag.collection(document.collection.name).search("yellow badge security desk", mode="text")
    assert hit.source_id == document.source_id


def test_ocr_text_of_a_photo_holds_the_paragraph(ocr_on: None) -> None:
    [doc] = load_bytes(photographed(PHOTO), content_type="image/jpeg", source_id="photo.jpg")
    words = doc.text.lower().split()
    assert {"visitors", "yellow", "badge", "security", "campus"} <= set(words)
    assert doc.metadata["ocr"] is True


def test_an_image_claiming_more_pixels_than_the_bound_is_refused_before_decoding(
    ocr_on: None, settings: Any
) -> None:
    settings.RAG = {**settings.RAG, "LOADERS": {"IMAGE_MAX_PIXELS": 1_000_000}}
    buffer = io.BytesIO()
    Image.new("L", (2000, 1000), 255).save(buffer, format="PNG")
    with pytest.raises(FileRefusedError, match="2000x1000 pixels; the limit is 1000000") as refused:
        load_bytes(buffer.getvalue(), content_type="image/png", source_id="big.png")
    assert refused.value.reason == "unsafe-file"


def test_the_system_check_names_a_missing_engine_and_missing_language_data(settings: Any) -> None:
    settings.RAG = {**settings.RAG, "OCR": {"ENABLED": True, "COMMAND": "/nonexistent/tesseract"}}
    [error] = [m for m in run_checks() if m.id == "django_rag.E141"]
    assert "is not installed" in error.msg and "apt-get install tesseract-ocr" in (error.hint or "")
    settings.RAG = {**settings.RAG, "OCR": {"ENABLED": True, "LANGUAGES": "eng+klingon"}}
    [error] = [m for m in run_checks() if m.id == "django_rag.E141"]
    assert "['klingon']" in error.msg
    settings.RAG = {**settings.RAG, "OCR": {"ENABLED": True, "LANGUAGES": "eng+por"}}
    assert not [m for m in run_checks() if m.id == "django_rag.E141"]
