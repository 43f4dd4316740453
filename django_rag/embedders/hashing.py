"""A deterministic embedder with no model: signed feature hashing of words.

Texts that share words get similar vectors, so it is good enough for tests and demos that
check plumbing rather than meaning. It is fast, offline and identical across processes.
"""

from __future__ import annotations

import hashlib
import math
import re

from .base import BaseEmbedder, Vector

__all__ = ["HashingEmbedder"]

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder(BaseEmbedder):
    model = "hashing"
    dimensions = 384
    batch_size = 256

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        prefix = self.prefix(kind)
        return [self._vector(prefix + text) for text in texts]

    def _vector(self, text: str) -> Vector:
        vector = [0.0] * self.dimensions
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimensions
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        if not norm:
            # An empty or wordless text still needs a valid, non-zero vector for cosine distance.
            vector[0] = 1.0
            return vector
        return [x / norm for x in vector]
