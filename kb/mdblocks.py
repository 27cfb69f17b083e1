"""Parse Markdown (markdown-it-py) into small plain blocks that can be cached and drawn without the parser."""
from __future__ import annotations

# A block is a tuple:
#   ("heading", level, inlines)      ("para", inlines)        ("code", lang, text)
#   ("list", ordered, start, items)  items: list of lists of blocks
#   ("table", header, rows)          header: list of inlines; rows: list of lists of inlines
#   ("quote", blocks)                ("rule",)
# An inline run is (text, style) with style in "", "code", "bold", "italic", "link:<url>".


def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _inlines(token) -> list[tuple[str, str]]:
    runs: list[tuple[str, str]] = []
    styles: list[str] = []
    for child in token.children or []:
        kind = child.type
        if kind == "text":
            runs.append((child.content, styles[-1] if styles else ""))
        elif kind == "code_inline":
            runs.append((child.content, "code"))
        elif kind in ("softbreak", "hardbreak"):
            runs.append((" " if kind == "softbreak" else "\n", ""))
        elif kind == "strong_open":
            styles.append("bold")
        elif kind == "em_open":
            styles.append("italic")
        elif kind == "link_open":
            styles.append("link:" + str(child.attrs.get("href", "")))
        elif kind in ("strong_close", "em_close", "link_close"):
            if styles:
                styles.pop()
        elif kind in ("html_inline", "image"):
            runs.append((child.content, ""))
    return runs


def parse_blocks(markdown: str) -> list[tuple]:
    tokens = _parser().parse(markdown)
    blocks, _ = _parse_until(tokens, 0, None)
    return blocks


def _parse_until(tokens, i: int, closing: str | None) -> tuple[list[tuple], int]:
    blocks: list[tuple] = []
    while i < len(tokens):
        tok = tokens[i]
        kind = tok.type
        if closing and kind == closing:
            return blocks, i + 1
        if kind == "heading_open":
            blocks.append(("heading", int(tok.tag[1]), _inlines(tokens[i + 1])))
            i += 3
        elif kind == "paragraph_open":
            blocks.append(("para", _inlines(tokens[i + 1])))
            i += 3
        elif kind in ("fence", "code_block"):
            blocks.append(("code", (tok.info or "").strip(), tok.content.rstrip("\n")))
            i += 1
        elif kind in ("bullet_list_open", "ordered_list_open"):
            ordered = kind == "ordered_list_open"
            start = int(tok.attrs.get("start", 1)) if ordered else 1
            close = kind.replace("_open", "_close")
            items, i = [], i + 1
            while tokens[i].type != close:
                item, i = _parse_until(tokens, i + 1, "list_item_close")
                items.append(item)
            blocks.append(("list", ordered, start, items))
            i += 1
        elif kind == "table_open":
            header, rows, row = None, [], []
            i += 1
            while tokens[i].type != "table_close":
                t = tokens[i]
                if t.type == "tr_open":
                    row = []
                elif t.type in ("th_open", "td_open"):
                    row.append(_inlines(tokens[i + 1]))
                    i += 2
                elif t.type == "tr_close":
                    if header is None:
                        header = row
                    else:
                        rows.append(row)
                i += 1
            blocks.append(("table", header or [], rows))
            i += 1
        elif kind == "blockquote_open":
            inner, i = _parse_until(tokens, i + 1, "blockquote_close")
            blocks.append(("quote", inner))
        elif kind == "hr":
            blocks.append(("rule",))
            i += 1
        else:
            i += 1
    return blocks, i
