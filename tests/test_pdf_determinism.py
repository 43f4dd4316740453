"""The same PDF bytes give the same text every run (re-ingesting an unchanged PDF embeds nothing).

pdfminer orders a page's text boxes by merging the closest pairs first and breaks ties between
equal distances by the boxes' memory addresses, so the columns of a printed matrix (R-intro.pdf
pages 23, 27 and 34: equal-width columns at equal spacing) came out in a different order from
run to run. R-intro.pdf is 632 KB, too big for a fixture; ``matrix_pdf()`` writes a 3 KB page
of the same shape: four R-style matrices of single-digit columns, 36 pt apart, in Courier.
"""

from __future__ import annotations

import hashlib
import io
import random

from pdfminer.high_level import extract_text

from django_rag.ingest.loaders import load_pdf


def matrix_pdf() -> bytes:
    """One page of four printed 4x5 matrices: many text boxes at exactly equal distances."""
    lines: list[tuple[int, int, str]] = []
    for k in range(4):
        top = 720 - k * 170
        lines.append((72, top, "[,1] [,2] [,3] [,4] [,5]"))
        for column in range(5):
            for row in range(4):
                lines.append((110 + column * 36, top - 12 * (row + 1), str((k + column * 4 + row) % 10)))
        lines += [(72, top - 12 * (row + 1), f"[{row + 1},]") for row in range(4)]
    content = "BT /F1 10 Tf\n" + "".join(f"1 0 0 1 {x} {y} Tm ({s}) Tj\n" for x, y, s in lines) + "ET\n"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        "/Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>",
        f"<< /Length {len(content)} >>\nstream\n{content}endstream",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def twenty_runs(extract) -> set[str]:
    """Digests of 20 extractions, with allocations in between so that memory addresses move."""
    digests, ballast = set(), []
    rng = random.Random(12)
    for _ in range(20):
        ballast.append([object() for _ in range(rng.randint(1, 5000))])
        digests.add(hashlib.sha1(extract().encode()).hexdigest())
    return digests


def test_twenty_extractions_of_the_same_pdf_are_identical() -> None:
    data = matrix_pdf()
    assert len(twenty_runs(lambda: load_pdf(data)[0].text)) == 1


def test_the_fixture_shows_pdfminers_own_nondeterminism() -> None:
    # Without this the test above would prove nothing: plain pdfminer reorders this page.
    data = matrix_pdf()
    assert len(twenty_runs(lambda: extract_text(io.BytesIO(data)))) > 1


def test_stable_order_keeps_every_box_of_the_page() -> None:
    text = load_pdf(matrix_pdf())[0].text
    plain = extract_text(io.BytesIO(matrix_pdf()))
    assert sorted(text.split()) == sorted(plain.split())
    assert text.count("[,1] [,2] [,3] [,4] [,5]") == 4
