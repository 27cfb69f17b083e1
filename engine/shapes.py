"""Which literals a block can hold, told from its distinct line shapes: lines with every hex digit
written as 0 repeat a great deal in a log, so the few distinct ones are quick to search."""
from __future__ import annotations

_TABLE = bytearray(range(256))
for _c in b"0123456789abcdefABCDEF":
    _TABLE[_c] = ord("0")
# A byte-for-byte mapping keeps substrings: where a literal occurs in a line, its mapped form occurs in
# the mapped line. A-F go with a-f so that mapping and lower-casing can be done in either order.
TABLE = bytes(_TABLE)
MAX_SHARE = 4  # give up where the distinct shapes exceed 1/MAX_SHARE of the block: no pass saved


def shape(literal: bytes) -> bytes:
    return literal.translate(TABLE)


class Shapes:
    """The distinct line shapes of one block, as text to search (and lower-cased, for caseless literals)."""

    __slots__ = ("text", "_lowered")

    def __init__(self, text: bytes):
        self.text = text
        self._lowered: bytes | None = None

    @classmethod
    def of(cls, block, end: int) -> "Shapes | None":
        """The block's shapes, or None where its lines are too varied for them to save anything."""
        lines = set(bytes(block[:end]).translate(TABLE).split(b"\n"))
        text = b"\n".join(lines)
        return cls(text) if len(text) * MAX_SHARE <= end else None

    def may_hold(self, literal: bytes, folded: bool = False) -> bool:
        """False only where no line of the block holds literal (lower-cased, when folded, in the
        lower-cased block)."""
        if b"\n" in literal:
            return True
        if folded:
            if self._lowered is None:
                self._lowered = self.text.lower()
            return shape(literal) in self._lowered
        return shape(literal) in self.text
