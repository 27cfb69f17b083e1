"""UTF-16 logs read as UTF-8: what Windows PowerShell's `>` and Out-File write by default (a byte-order mark, then two
bytes a character). The engines scan UTF-8 bytes, so such a log is decoded as it streams and handed on re-encoded."""
from __future__ import annotations

import codecs

CHUNK = 1 << 16  # UTF-16 bytes decoded at a time; the "utf-16" codec reads the byte-order mark and drops it


class Utf16Reader:
    """A read-only stream of UTF-8 bytes from a UTF-16 one; a broken pair or an odd last byte becomes U+FFFD."""

    def __init__(self, raw):
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
        self._pending = b""  # UTF-8 bytes decoded and not yet handed on, from self._at
        self._at = 0
        self._ended = False

    def _fill(self, want: int) -> None:
        while len(self._pending) - self._at < want and not self._ended:
            data = self._raw.read(CHUNK)
            text = self._decoder.decode(data, final=not data)
            self._ended = not data
            self._pending = self._pending[self._at:] + text.encode("utf-8")  # one copy per chunk, not per read
            self._at = 0

    def read1(self, n: int = -1) -> bytes:
        self._fill(1 if n is None or n < 0 else max(1, n))
        left = len(self._pending) - self._at
        n = left if n is None or n < 0 else min(n, left)
        out = self._pending[self._at:self._at + n]
        self._at += n
        return out

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            parts = []
            while True:
                part = self.read1(CHUNK)
                if not part:
                    return b"".join(parts)
                parts.append(part)
        self._fill(n)
        return self.read1(n)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
