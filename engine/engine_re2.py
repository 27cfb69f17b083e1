"""The RE2 engine: one `re2.Set` pass says which patterns occur in a block, then each one's own RE2 finds its lines."""
from __future__ import annotations

from gpudoctor.engine.engine_python import PythonMatcher, first_matching_line, match_end
from gpudoctor.engine.patterns import PatternSet, prefilter_regex

_MAX_MEM = 256 << 20


class Re2Matcher:
    name = "re2"

    def __init__(self, patterns: PatternSet, compiled):
        self.patterns = patterns
        self.set, self.regexes, self.set_ids, fallback = compiled
        # patterns RE2 cannot read (lookarounds, backreferences) keep the Python prefilter
        self.rest = PythonMatcher(patterns, fallback) if fallback else None

    @classmethod
    def build(cls, patterns: PatternSet) -> "Re2Matcher | None":
        if "re2" not in patterns.engines:
            patterns.engines["re2"] = _compile(patterns)
        compiled = patterns.engines["re2"]
        return None if compiled is None else cls(patterns, compiled)

    def candidates(self, block, end: int):
        found: dict[int, tuple[set[int], int]] = {}

        def add(start: int, index: int, at: int) -> None:
            entry = found.get(start)
            if entry is None:
                found[start] = ({index}, at)
            else:
                entry[0].add(index)

        data = bytes(block[:end]) if end != len(block) or not isinstance(block, bytes) else block
        patterns = self.patterns.patterns
        for k in self.set.Match(data) or ():
            index = self.set_ids[k]
            regex = self.regexes[k]
            if patterns[index].single:
                first = first_matching_line(self.patterns, patterns[index], data, end,
                                            (m.start() for m in regex.finditer(data)))
                if first is not None:
                    add(first[0], index, first[1])
                continue
            for m in regex.finditer(data):
                at = match_end(data, m)
                add(data.rfind(b"\n", 0, max(at - 1, 0)) + 1 if at else 0, index, at)
        if self.rest is not None:
            for start, (indexes, at) in self.rest.candidates(block, end).items():
                for index in indexes:
                    add(start, index, at)
        return found


def _compile(patterns: PatternSet):
    try:
        import re2
    except ImportError:
        return None
    options = re2.Options()
    options.max_mem = _MAX_MEM
    rset = re2.Set.SearchSet(options)
    regexes, set_ids, fallback = [], [], []
    for p in patterns.patterns:
        expr = "(?m)" + ("(?i)" if p.caseless else "") + prefilter_regex(p.regex)
        try:
            regex = re2.compile(expr.encode("utf-8"), options)
            rset.Add(expr.encode("utf-8"))
        except Exception:  # re2.error, or a pattern the set refuses
            fallback.append(p.index)
            continue
        regexes.append(regex)
        set_ids.append(p.index)
    try:
        rset.Compile()
    except Exception:
        return None
    return rset, regexes, set_ids, fallback
