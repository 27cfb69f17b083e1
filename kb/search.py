"""Typo-tolerant free-text search over catalogue entries: field-weighted BM25, fuzzy terms, phrase bonus."""
from __future__ import annotations

import math
import re

from gpudoctor.kb.model import Entry
from gpudoctor.kb.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs every run start-up time
    from typing import Iterable

# How much a hit in each field counts: users describe what they see, so symptoms,
# titles and the exact error text outrank the explanation of the cause.
FIELD_WEIGHTS = {
    "id": 4.0,
    "title": 3.0,
    "errors": 2.5,
    "symptoms": 2.0,
    "keywords": 2.0,
    "paraphrases": 2.0,
    "summary": 1.0,
    "cause": 0.5,
    "fix": 0.3,
}
_K1, _B = 1.2, 0.6
_SCALE = 8.0  # raw score -> 0..1: a title-and-error match scores about 0.95, one shared word under 0.2
_FUZZY_MIN = 84.0  # rapidfuzz ratio for a misspelt term to count (adress ~ address = 92)

_STOP = frozenset(
    "a an the and or of to in on at is are was were be been it its this that with for from by as "
    "my our your i we you he she they them when while after before during why how what which does do "
    "did not no but into out up so than then there get got gets getting just only all can t cannot doesn "
    "don isn won wasn aren should would could will please help about any some".split()
)
_SYNONYMS = {
    # hang-like words all mean the same thing to a user in a hurry
    "hang": "hang", "hangs": "hang", "hung": "hang", "hanging": "hang", "freeze": "hang",
    "freezes": "hang", "frozen": "hang", "froze": "hang", "stuck": "hang", "stall": "hang",
    "stalls": "hang", "stalled": "hang", "deadlock": "hang", "deadlocks": "hang", "deadlocked": "hang",
    "crash": "crash", "crashes": "crash", "crashed": "crash", "dies": "crash", "died": "crash",
    "killed": "crash",
    "gpus": "gpu", "cuda": "cuda", "cards": "gpu", "card": "gpu", "devices": "device",
    "nic": "interface", "nics": "interface", "iface": "interface", "interfaces": "interface",
    "ifname": "interface",
    "procs": "process", "processes": "process", "proc": "process", "workers": "worker",
    "epochs": "epoch", "batches": "batch", "minutes": "minute", "mins": "minute", "min": "minute",
    "secs": "second", "seconds": "second", "timed": "timeout", "timeouts": "timeout",
    "multinode": "multi-node", "multi": "multi",
    "oom": "oom", "nan": "nan", "nans": "nan",
    # words users pick for the same idea
    "shuffle": "shuffle", "shuffled": "shuffle", "shuffling": "shuffle", "shuffles": "shuffle",
    "reshuffle": "shuffle", "locate": "find", "identify": "find", "pinpoint": "find",
    "corrupt": "corrupted", "corruption": "corrupted", "broken": "corrupted",
    "duplicated": "duplicate", "twice": "duplicate", "multiple": "multi",
    "resume": "resume", "resuming": "resume", "resumed": "resume", "restarted": "restart",
    "restarts": "restart", "restarting": "restart",
}
# Numbers users type that the catalogue spells another way.
_EXPANSIONS = {
    "gpu0": ("gpu", "0"), "cuda:0": ("cuda", "0"), "30min": ("30", "minute"),
    "1800s": ("1800",), "29500": ("29500", "port"),
}
_TOKEN = re.compile(r"[a-z0-9]+(?:[._:/-][a-z0-9]+)*")
_WORD = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    if word in _SYNONYMS:
        return _SYNONYMS[word]
    if len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 4 and word.endswith("es") and word[-3] in "sxz":
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        word = word[:-2]
    return _SYNONYMS.get(word, word)


def tokenize(text: str) -> list[str]:
    """Lower-case terms; compound tokens (NCCL_SOCKET_IFNAME, cuda:0) also yield their parts."""
    out: list[str] = []
    for raw in _TOKEN.findall(text.lower().replace("_", "-")):
        if raw in _EXPANSIONS:
            out.extend(_EXPANSIONS[raw])
            continue
        parts = _WORD.findall(raw)
        if len(parts) > 1:
            out.append(raw)
        for part in parts:
            if part in _EXPANSIONS:
                out.extend(_EXPANSIONS[part])
            elif part not in _STOP:
                out.append(_stem(part))
    if "out of memory" in text.lower():  # what OOM stands for
        out.append("oom")
    joined = " ".join(out)
    # "30 minutes" is how people say the 1800 s NCCL default
    if "30 minute" in joined:
        out.append("1800")
    return out


def _entry_fields(entry: Entry) -> dict[str, str]:
    return {
        "id": entry.id,
        "title": entry.title,
        "errors": "\n".join(entry.error_strings),
        "symptoms": "\n".join(entry.symptoms),
        "keywords": " ".join(entry.keywords),
        "paraphrases": "\n".join(entry.paraphrases),
        "summary": entry.summary,
        "cause": entry.cause,
        "fix": entry.fix_summary + "\n" + "\n".join(s.text for s in entry.fix),
    }


@record(frozen=True)
class Hit:
    id: str
    score: float  # 0..1, relative to a perfect match of every query term
    matched: tuple[str, ...]  # query terms that matched, as the user typed them


@record
class SearchIndex:
    ids: list[str]
    # per field: list (per entry) of {term: count}, and field lengths
    counts: dict[str, list[dict[str, int]]]
    lengths: dict[str, list[int]]
    avg_length: dict[str, float]
    df: dict[str, int]  # in how many entries a term appears (any field)
    vocab: list[str]
    bigrams: list[frozenset[tuple[str, str]]]
    phrases: list[tuple[str, ...]]  # lower-cased error strings and symptoms for the phrase bonus

    @classmethod
    def build(cls, entries: Iterable[Entry]) -> "SearchIndex":
        entries = list(entries)
        counts: dict[str, list[dict[str, int]]] = {f: [] for f in FIELD_WEIGHTS}
        lengths: dict[str, list[int]] = {f: [] for f in FIELD_WEIGHTS}
        df: dict[str, int] = {}
        bigrams, phrases = [], []
        for entry in entries:
            seen: set[str] = set()
            pairs: set[tuple[str, str]] = set()
            for name, text in _entry_fields(entry).items():
                terms = tokenize(text)
                bag: dict[str, int] = {}
                for t in terms:
                    bag[t] = bag.get(t, 0) + 1
                counts[name].append(bag)
                lengths[name].append(len(terms))
                seen.update(bag)
                if name in ("title", "errors", "symptoms", "keywords", "paraphrases", "summary"):
                    pairs.update(zip(terms, terms[1:]))
            for t in seen:
                df[t] = df.get(t, 0) + 1
            bigrams.append(frozenset(pairs))
            phrases.append(tuple(s.lower() for s in entry.error_strings + entry.symptoms + entry.paraphrases + (entry.title,)))
        avg = {f: (sum(v) / len(v) if v else 0.0) or 1.0 for f, v in lengths.items()}
        return cls(
            ids=[e.id for e in entries], counts=counts, lengths=lengths, avg_length=avg, df=df,
            vocab=sorted(df), bigrams=bigrams, phrases=phrases,
        )

    def _expand(self, term: str) -> list[tuple[str, float]]:
        """The term itself if known, plus close spellings from the vocabulary (typos)."""
        from rapidfuzz import fuzz, process

        out = [(term, 1.0)] if term in self.df else []
        if len(term) >= 4 and not term.isdigit():
            for cand, score, _ in process.extract(term, self.vocab, scorer=fuzz.ratio, limit=4,
                                                  score_cutoff=_FUZZY_MIN):
                if cand != term and abs(len(cand) - len(term)) <= 3:
                    out.append((cand, 0.8 * score / 100.0))
        return out

    def _idf(self, term: str) -> float:
        n, df = len(self.ids), self.df.get(term, 0)
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def _phrase_scores(self, q_lower: str) -> dict[int, float]:
        """Entry index -> its best fuzz.partial_ratio against the query, where that is 85 or more: one call into
        rapidfuzz's C loop, whose cut-off also lets it give up early on hopeless phrases."""
        from rapidfuzz import fuzz, process

        owners, phrases = [], []
        for i, entry_phrases in enumerate(self.phrases):
            for phrase in entry_phrases:
                if len(phrase) >= 12:
                    owners.append(i)
                    phrases.append(phrase)
        best: dict[int, float] = {}
        for _phrase, score, k in process.extract(q_lower, phrases, scorer=fuzz.partial_ratio, score_cutoff=85,
                                                 limit=None):
            best[owners[k]] = max(best.get(owners[k], 0.0), score)
        return best

    def search(self, query: str, limit: int = 10) -> list[Hit]:
        terms = list(dict.fromkeys(tokenize(query)))
        if not terms:
            return []
        expanded = {t: self._expand(t) for t in terms}
        q_pairs = list(zip(terms, terms[1:]))
        q_lower = query.lower().strip()
        best_possible = sum(max((self._idf(v) for v, _ in expanded[t]), default=0.0) for t in terms) or 1.0
        phrase_scores = self._phrase_scores(q_lower) if len(q_lower) >= 12 else {}
        scores: list[tuple[float, int, tuple[str, ...]]] = []
        for i in range(len(self.ids)):
            total, matched = 0.0, []
            for term in terms:
                term_best = 0.0
                for variant, sim in expanded[term]:
                    idf = self._idf(variant)
                    s = 0.0
                    for name, weight in FIELD_WEIGHTS.items():
                        tf = self.counts[name][i].get(variant, 0)
                        if tf:
                            norm = 1 - _B + _B * self.lengths[name][i] / self.avg_length[name]
                            s += weight * tf * (_K1 + 1) / (tf + _K1 * norm)
                    term_best = max(term_best, sim * idf * s / 3.0)
                if term_best > 0:
                    matched.append(term)
                    total += term_best
            if not matched:
                continue
            # terms adjacent in the query and in the entry: "address already", "docker0 nccl"
            total += 0.6 * sum(self._idf(a) for a, b in q_pairs if (a, b) in self.bigrams[i])
            # a pasted error message or a near-verbatim symptom
            phrase = phrase_scores.get(i, 0)
            if phrase >= 85:
                total += best_possible * (phrase - 80) / 20.0
            coverage = len(matched) / len(terms)
            scores.append((total * (0.5 + 0.5 * coverage), i, tuple(matched)))
        scores.sort(key=lambda s: (-s[0], s[1]))
        return [
            Hit(id=self.ids[i], score=round(1.0 - math.exp(-s / _SCALE), 3), matched=m)
            for s, i, m in scores[:limit]
        ]
