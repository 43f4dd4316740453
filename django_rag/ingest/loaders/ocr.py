"""OCR of images (PNG, JPEG, TIFF, WebP, GIF) and of rendered PDF pages, with Debian's Tesseract.

Off unless ``RAG["OCR"]["ENABLED"]``; the languages are ``RAG["OCR"]["LANGUAGES"]`` (Tesseract's
``eng+por`` form, each one's data installed: ``apt-get install tesseract-ocr-por``). Tesseract
runs as a separate process with the image on its standard input, stopped after
``RAG["LOADERS"]["OCR_TIMEOUT"]`` seconds per page; an image is refused past
``IMAGE_MAX_PIXELS`` (read from its header, before it is decoded) and a TIFF or PDF is read for
at most ``OCR_MAX_PAGES`` pages. A document read by OCR has ``metadata["ocr"]`` set, which the
pipeline records as its Document's ``status_reason`` ``ocr``. Pillow is the ``ocr`` extra.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

from ...conf import rag_section
from ...exceptions import ConfigurationError, FileRefusedError
from ...types import CORRUPT_FILE, UNSAFE_FILE, UNSUPPORTED_TYPE, RagDocument
from .limits import LoaderLimits, loader_limits
from .structure import paged_document

__all__ = ["OCR_DEFAULTS", "load_image", "ocr_enabled", "ocr_image", "ocr_problems", "ocr_settings"]

OCR_DEFAULTS: dict[str, Any] = {
    "ENABLED": False,
    # Tesseract language codes joined by "+"; each needs its tesseract-ocr-<code> package.
    "LANGUAGES": "eng",
    # The tesseract executable: a name looked up on PATH, or a path.
    "COMMAND": "tesseract",
    # Resolution PDF pages are rendered at for OCR (lowered for a page that would pass
    # IMAGE_MAX_PIXELS).
    "DPI": 200,
}
INSTALL_HINT = 'OCR of images needs Pillow: pip install "django-rag[ocr]"'


def ocr_settings() -> dict[str, Any]:
    """``RAG["OCR"]`` over ``OCR_DEFAULTS`` (keys in upper case)."""
    given = rag_section("OCR", {key.lower() for key in OCR_DEFAULTS})
    return {**OCR_DEFAULTS, **{key.upper(): value for key, value in given.items()}}


def ocr_enabled() -> bool:
    return bool(ocr_settings()["ENABLED"])


def ocr_problems() -> list[tuple[str, str]]:
    """(message, hint) for each reason OCR, switched on, cannot run; none when it is off."""
    options = ocr_settings()
    if not options["ENABLED"]:
        return []
    command = str(options["COMMAND"])
    found = shutil.which(command)
    if found is None:
        return [
            (
                f"RAG['OCR'] is enabled but its engine {command!r} is not installed",
                "apt-get install tesseract-ocr tesseract-ocr-eng (and one package per language), "
                "set RAG['OCR']['COMMAND'] to its path, or set RAG['OCR']['ENABLED'] to False",
            )
        ]
    try:
        listed = subprocess.run(
            [found, "--list-langs"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        return [(f"RAG['OCR']['COMMAND'] {command!r} cannot run: {exc}", "check the Tesseract install")]
    missing = [lang for lang in str(options["LANGUAGES"]).split("+") if lang and lang not in listed]
    if missing:
        return [
            (
                f"RAG['OCR']['LANGUAGES'] names {missing}, which Tesseract has no data for",
                "install tesseract-ocr-<language> (e.g. tesseract-ocr-por) or remove it from LANGUAGES",
            )
        ]
    return []


def _pillow() -> Any:
    # Pillow is the optional "ocr" extra: imported when an image is read.
    try:
        from PIL import Image
    except ImportError as exc:
        raise ConfigurationError(INSTALL_HINT) from exc
    return Image


def ocr_image(image: Any, label: str, limits: LoaderLimits | None = None) -> str:
    """The text Tesseract reads in ``image`` (a Pillow image), within ``OCR_TIMEOUT`` seconds."""
    limits = limits or loader_limits()
    options = ocr_settings()
    buffer = io.BytesIO()
    image.convert("L").save(buffer, format="PNG")
    command = [str(options["COMMAND"]), "stdin", "stdout", "-l", str(options["LANGUAGES"]), "--psm", "3"]
    # One thread per Tesseract: several ingest workers share the machine's cores.
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        done = subprocess.run(
            command,
            input=buffer.getvalue(),
            capture_output=True,
            timeout=limits.ocr_timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FileRefusedError(
            UNSAFE_FILE,
            f"{label}: OCR took more than {limits.ocr_timeout} s (RAG['LOADERS']['OCR_TIMEOUT'])",
        ) from exc
    except OSError as exc:
        raise ConfigurationError(
            f"OCR of {label} cannot run {command[0]!r}: {exc}; "
            "install tesseract-ocr or fix RAG['OCR']['COMMAND']"
        ) from exc
    if done.returncode != 0:
        error = done.stderr.decode("utf-8", "replace").strip()[:500]
        raise FileRefusedError(CORRUPT_FILE, f"{label}: Tesseract failed: {error}")
    return done.stdout.decode("utf-8", "replace")


def load_image(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """The text of an image by OCR: one page per frame of a TIFF, none for an image without text.

    Refused (FileRefusedError) when OCR is off, the image claims more than IMAGE_MAX_PIXELS or
    cannot be decoded.
    """
    label = f"image {source_id!r}"
    if not ocr_enabled():
        raise FileRefusedError(
            UNSUPPORTED_TYPE, f"{label} needs OCR, which is off (set RAG['OCR']['ENABLED'] to True)"
        )
    image_module = _pillow()
    from PIL import ImageOps  # the optional "ocr" extra, as above

    limits = loader_limits()
    try:
        image = image_module.open(io.BytesIO(data))
    except image_module.DecompressionBombError as exc:
        raise FileRefusedError(UNSAFE_FILE, f"{label}: {exc}") from exc
    except Exception as exc:
        raise FileRefusedError(CORRUPT_FILE, f"{label} cannot be decoded: {exc}") from exc
    pages = []
    content_type = image_module.MIME.get(image.format or "", "") or "image"
    with image:
        frames = min(int(getattr(image, "n_frames", 1) or 1), limits.ocr_max_pages)
        for frame in range(frames):
            try:
                image.seek(frame)
                width, height = image.size
                if width * height > limits.image_max_pixels:
                    raise FileRefusedError(
                        UNSAFE_FILE,
                        f"{label} is {width}x{height} pixels; the limit is {limits.image_max_pixels} "
                        "(RAG['LOADERS']['IMAGE_MAX_PIXELS'])",
                    )
                # A photo's EXIF orientation, so the text stands upright for Tesseract.
                upright = ImageOps.exif_transpose(image) if frame == 0 else image.copy()
            except FileRefusedError:
                raise
            except Exception as exc:
                raise FileRefusedError(CORRUPT_FILE, f"{label} cannot be decoded: {exc}") from exc
            pages.append(ocr_image(upright, label if frames == 1 else f"{label} page {frame + 1}", limits))
    derived = {
        "source": base_url or source_id,
        "loader": "ocr",
        "content_type": content_type,
        "ocr": True,
    }
    return paged_document(source_id, pages, derived, metadata, tags)
