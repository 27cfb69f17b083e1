"""UTF-16 logs read as UTF-8: what Windows PowerShell's `>` and Out-File write by default (a byte-order mark, then two
bytes a character). The engines scan UTF-8 bytes, so such a log is decoded as it streams and handed on re-encoded."""
from __future__ import annotations

import codecs

BOMS = (b"\xff\xfe", b"\xfe\xff")  # little- and big-endian; the "utf-16" codec reads the mark and drops it
CHUNK = 1 << 16


class Utf16Reader:
    """A read-only stream of UTF-8 bytes from a UTF-16 one; a broken pair or an odd last byte becomes U+FFFD."""

    def __init__(self, raw):
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
        self._pending = b""
        self._ended = False

    def _fill(self, want: int) -> None:
        while len(self._pending) < want and not self._ended:
            data = self._raw.read(CHUNK)
            if not data:
                self._ended = True
                self._pending += self._decoder.decode(b"", final=True).encode("utf-8")
                break
            self._pending += self._decoder.decode(data).encode("utf-8")

    def read1(self, n: int = -1) -> bytes:
        self._fill(1 if n is None or n < 0 else max(1, n))
        if n is None or n < 0:
            n = len(self._pending)
        out, self._pending = self._pending[:n], self._pending[n:]
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
