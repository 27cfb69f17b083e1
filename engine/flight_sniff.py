"""Tell a flight-recorder dump from a text log by its first bytes, without loading the dump reader."""
from __future__ import annotations

import zlib

# How much of a file `looks_like_dump` wants to see; callers may pass less.
SNIFF_BYTES = 4096

_GZIP_MAGIC = b"\x1f\x8b"
_TOP_KEYS = ("pg_config", "pg_status", "entries")


def looks_like_dump(head: bytes) -> bool:
    """Cheap guess from a file's first bytes (SNIFF_BYTES is plenty); `load_dump` has the final word."""
    if head.startswith(_GZIP_MAGIC):
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, SNIFF_BYTES)
        except zlib.error:
            return False
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return any(key.encode() in head for key in _TOP_KEYS)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return text.startswith(b"{") and any(f'"{key}"'.encode() in text for key in (*_TOP_KEYS, "collective_seq_id"))
