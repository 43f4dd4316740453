"""A small HTTP client for a site served on loopback: cookies, CSRF, forms and files, no redirects.

Plain ``urllib`` so the tests that drive the example site as a browser would (login, the admin's
forms) need no HTTP package beyond the standard library.
"""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from email.message import Message
from typing import Any
from urllib.parse import urlencode


@dataclass
class Reply:
    status: int
    headers: Message
    body: str

    def header(self, name: str) -> str:
        return self.headers.get(name) or ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class SiteClient:
    """One visitor of ``base``: their cookies, their requests."""

    def __init__(self, base: str, timeout: float = 30) -> None:
        self.base = base
        self.timeout = timeout
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.cookies), _NoRedirect()
        )

    def request(
        self,
        path: str,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        method: str | None = None,
    ) -> Reply:
        request = urllib.request.Request(self.base + path, data=data, headers=headers or {}, method=method)
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                return Reply(response.status, response.headers, response.read().decode(errors="replace"))
        except urllib.error.HTTPError as error:
            with error:
                return Reply(error.code, error.headers, error.read().decode(errors="replace"))

    def get(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        return self.request(path, headers=headers)

    def csrf(self) -> str:
        return next((c.value or "" for c in self.cookies if c.name == "csrftoken"), "")

    def post(
        self, path: str, fields: dict[str, Any], files: dict[str, tuple[str, bytes]] | None = None
    ) -> Reply:
        headers = {"X-CSRFToken": self.csrf(), "Referer": self.base + path}
        if files:
            body, content_type = _multipart({"csrfmiddlewaretoken": self.csrf(), **fields}, files)
        else:
            body = urlencode({"csrfmiddlewaretoken": self.csrf(), **fields}, doseq=True).encode()
            content_type = "application/x-www-form-urlencoded"
        return self.request(path, body, {**headers, "Content-Type": content_type}, method="POST")

    def log_in(self, username: str, password: str) -> None:
        self.get("/accounts/login/")  # the CSRF cookie
        reply = self.post("/accounts/login/", {"username": username, "password": password})
        if reply.status != 302:
            raise AssertionError(f"logging in as {username} gave {reply.status}: {reply.body[:500]}")


def _multipart(fields: dict[str, Any], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    for name, (filename, content) in files.items():
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        )
        parts.append(head.encode() + content + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def form_value(html: str, name: str) -> str:
    """The value of the input ``name`` in ``html`` ("" if there is none)."""
    match = re.search(rf'name="{re.escape(name)}"[^>]*value="([^"]*)"', html)
    return match.group(1) if match else ""
