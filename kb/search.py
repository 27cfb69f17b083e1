"""Typo-tolerant free-text search over catalogue entries: field-weighted BM25, fuzzy terms, phrase and line bonus."""
from __future__ import annotations

import math
import re

from gpudoctor.kb.boilerplate import without_stock_advice
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
_PAIR = 0.6  # bonus per query bigram the entry also has, times its idf
_LINE = 2.0  # bonus for the share of the query (by idf) that one line of the entry holds
_SCALE = 8.0  # raw score -> 0..1: a title-and-error match scores about 0.95, one shared word under 0.2
_SCALE_LINES = 11.0  # the same with the line bonus, which adds about 40% to a typical top score
_FUZZY_MIN = 84.0  # rapidfuzz ratio for a misspelt term to count (adress ~ address = 92)
_FUZZY_LEN = 5  # shortest term matched to misspellings (4 letters pass only by gaining one: hang ~ chang)

_STOP = frozenset(
    "a an the and or of to in on at is are was were be been it its this that with for from by as "
    "my our your i we you he she they them when while after before during why how what which does do "
    "did not no but into out up so than then there get got gets getting just only all can t cannot doesn "
    "don isn won wasn aren should would could will please help about any some s".split()
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
    # a failure that comes and goes: a bad sample or a sporadic fault on one rank, not a fixed code path
    "occasionally": "random", "sometimes": "random", "randomly": "random", "sporadically": "random",
    "sporadic": "random", "intermittent": "random", "intermittently": "random", "occasional": "random",
    "vram": "memory", "mem": "memory", "used": "use", "using": "use", "freezing": "hang", "kill": "crash",
    "kills": "crash", "killing": "crash",
    # the wrapper's long names are its short ones
    "distributeddataparallel": "ddp", "fullyshardeddataparallel": "fsdp", "ckpt": "checkpoint",
    "slower": "slow", "slowly": "slow", "slowdown": "slow", "slowness": "slow",
    # a loss that blew up is the same failure whichever value it printed
    "inf": "nan", "infinity": "nan", "infs": "nan", "infinite": "nan",
    "identical": "same",
    "dpp": "ddp",  # the usual slip, too short for the fuzzy match
    "unbalanced": "imbalance", "imbalanced": "imbalance", "unequal": "uneven",
    # "across GPUs", "on each GPU" and "on every GPU" say one thing
    "each": "every", "across": "every",
    "inconsistent": "mismatch", "inconsistence": "mismatch", "inconsistency": "mismatch",
    "mismatched": "mismatch", "mismatches": "mismatch",
    "differ": "differ", "differs": "differ", "different": "differ", "difference": "differ",
    "differences": "differ", "differently": "differ",
    # a figure that got worse, however the user puts it
    "drop": "drop", "drops": "drop", "dropped": "drop", "dropping": "drop", "descend": "drop",
    "descended": "drop", "decline": "drop", "declined": "drop",
    "decrease": "drop", "decreased": "drop", "decreases": "drop", "worse": "drop",
    "lower": "drop",
}
# Phrases users type for what the catalogue says one way: "the first gpu" is GPU 0, "rank zero" is rank 0.
_PHRASES = [
    (re.compile(r"\b(?:first|main|primary) (gpu|device|card)\b"), r"\1 0"),
    (re.compile(r"\brank zero\b"), "rank 0"),
]
# a canonical word is its own synonym, so "device" meets "devices" however the stemmer would cut it
_SYNONYMS.update({v: v for v in set(_SYNONYMS.values())})
# Numbers users type that the catalogue spells another way.
_EXPANSIONS = {
    "gpu0": ("gpu", "0"), "cuda:0": ("cuda", "0"), "30min": ("30", "minute"),
    "1800s": ("1800",), "29500": ("29500", "port"),
}
_TOKEN = re.compile(r"[a-z0-9]+(?:[._:/-][a-z0-9]+)*")
_WORD = re.compile(r"[a-z0-9]+")
_COMPOUND = re.compile(r"[._:/-]")
_FILE_NAME = re.compile(r"\.(?:py|sh|ya?ml|json|txt|log|cfg|toml|ipynb)$")


def _stem(word: str) -> str:
    if word in _SYNONYMS:
        return _SYNONYMS[word]
    stripped = True
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
    else:
        stripped = False
    if word in _SYNONYMS:
        return _SYNONYMS[word]
    # stopped/stop, running/run: a doubled final consonant left by the suffix
    if stripped and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouslz":
        word = word[:-1]
    # save/saved/saving and compare/compared all meet at the stem without the final e
    if len(word) > 3 and word.endswith("e") and not word.endswith("ee"):
        word = word[:-1]
    return _SYNONYMS.get(word, word)


def _together(parts: list[str]) -> str | None:
    """A compound of two or three words spelled as one (all_reduce: allreduce), or None."""
    return _stem("".join(parts)) if len(parts) <= 3 and all(p.isalpha() for p in parts) else None


def tokenize(text: str) -> list[str]:
    """Lower-case terms; compound tokens (NCCL_SOCKET_IFNAME, cuda:0) also yield their parts."""
    out: list[str] = []
    for term, together, _ in _terms(text):
        out.append(term)
        if together:
            out.append(together)
    return out


def _terms(text: str) -> list[tuple[str, str | None, str | None]]:
    """Each term with the same word spelled together, if it has another spelling (all_reduce: allreduce),
    and the compound it is a part of, if any (nccl in nccl-socket-ifname)."""
    out: list[tuple[str, str | None, str | None]] = []
    text = text.lower()
    if not text.isascii():
        from gpudoctor.kb.cjk_words import translate

        text = translate(text)
    for pattern, said in _PHRASES:
        text = pattern.sub(said, text)
    for raw in _TOKEN.findall(text.replace("_", "-")):
        if raw in _EXPANSIONS:
            out.extend((t, None, None) for t in _EXPANSIONS[raw])
            continue
        parts = _WORD.findall(raw)
        of = None
        if len(parts) > 1 and all(p.isdigit() for p in parts):
            out.append((raw, None, None))  # 0.25, 10.0.0.1: the pieces of a number are no words
            continue
        if len(parts) > 1:
            if _FILE_NAME.search(raw):
                # a script's name (dist_train.py) is the user's choice, not words about the failure, but a
                # library file's name says what ran: data_parallel.py -> dataparallel, as DataParallel reads
                base = _WORD.findall(re.split(r"[/\\:]", raw)[-1].rsplit(".", 1)[0])
                out.append((raw, _stem("".join(base)) if 1 < len(base) <= 3 else None, None))
                continue
            # all_reduce, all-reduce and allreduce are one word
            out.append((raw, _together(parts), None))
            of = raw
            # an attribute path (model.no_sync, dist.all_reduce): each dotted name is a compound of its own
            for seg in (raw.split(".") if "." in raw else ()):
                sub = _WORD.findall(seg)
                if len(sub) > 1 and (joined := _together(sub)):
                    out.append((seg, joined, of))
        for part in parts:
            if part in _EXPANSIONS:
                out.extend((t, None, of) for t in _EXPANSIONS[part])
            elif part not in _STOP:
                out.append((_stem(part), None, of))
    if "out of memory" in text.lower():  # what OOM stands for
        out.append(("oom", None, None))
    # "30 minutes" is how people say the 1800 s NCCL default
    if "30 minute" in " ".join(t for t, _, _ in out):
        out.append(("1800", None, None))
    return out


def _words(text: str) -> list[str]:
    """The terms in reading order without compounds, so that a compound and its own parts are no word pair."""
    return [t for t, _, _ in _terms(text) if not _COMPOUND.search(t)]


# a placeholder in an emitter's message template: {name}, {}, %s / %d / %lu, or a C++ stream's " << x << "
# (compiled when an index is built, by re's own cache)
_PLACEHOLDER = r"\{[^{}]*\}|%[-+ #0-9.]*(?:l{0,2}|z|h)[sdiufxXgGepc]|\"\s*<<.*?<<\s*\"|\\n"
MIN_TEMPLATE_PHRASE = 30  # a shorter fixed part ("Traceback (most recent", "NCCL error in:") says too little
MIN_TEMPLATE_WEIGHT = 0.6  # only the messages that name their entry on their own, not the corroborating ones


def _template_phrases(entry: Entry) -> tuple[str, ...]:
    """The fixed parts of the messages the entry's confident signatures were written from (their provenance
    templates): a pasted error the catalogue knows only from the emitter's source still earns the phrase bonus."""
    out: list[str] = []
    for sig in entry.signatures:
        if sig.context or sig.needs or sig.after or sig.weight < MIN_TEMPLATE_WEIGHT:
            continue
        for prov in sig.provenance:
            for part in re.split(_PLACEHOLDER, prov.template):
                part = part.strip(" \t'\"`.:;,()[]").lower()
                if len(part) >= MIN_TEMPLATE_PHRASE and part not in out:
                    out.append(part)
    return tuple(out)


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


LONG_WORD = r"[a-z0-9]{5,}"  # a word of five or more letters or digits, as engine/possible.py reads a failure line


def phrase_table(phrases: list[tuple[str, ...]]) -> tuple:
    """SearchIndex.phrase_table, built once with the index (and cached on disk with it)."""
    long_word = re.compile(LONG_WORD)
    owners, flat, by_word, always = [], [], {}, []
    for i, entry_phrases in enumerate(phrases):
        for phrase in entry_phrases:
            if len(phrase) >= 12:
                k = len(flat)
                owners.append(i)
                flat.append(phrase)
                words = set(long_word.findall(phrase))
                for word in words:
                    by_word.setdefault(word, []).append(k)
                if not words:
                    always.append(k)
    return owners, flat, by_word, always


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
    lines: list[tuple[frozenset[str], ...]]  # per entry: the terms of its title and of each paraphrase
    # (owner entry of each phrase of 12+ characters, those phrases, long word -> their numbers, the numbers of those
    # with no long word): engine/possible.py scores only the phrases sharing a long word with a failure line
    phrase_table: tuple = ()

    @classmethod
    def build(cls, entries: Iterable[Entry]) -> "SearchIndex":
        entries = list(entries)
        counts: dict[str, list[dict[str, int]]] = {f: [] for f in FIELD_WEIGHTS}
        lengths: dict[str, list[int]] = {f: [] for f in FIELD_WEIGHTS}
        df: dict[str, int] = {}
        bigrams, phrases, lines = [], [], []
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
                    words = _words(text)
                    pairs.update(zip(words, words[1:]))
            for t in seen:
                df[t] = df.get(t, 0) + 1
            bigrams.append(frozenset(pairs))
            own = entry.error_strings + entry.symptoms + entry.paraphrases + (entry.title,)
            phrases.append(tuple(s.lower() for s in own) + _template_phrases(entry))
            # titles and paraphrases are written as users title their issues; symptoms and error
            # strings are long and shared, and pasted log lines over-match them (measured on dev logs)
            lines.append(tuple(frozenset(tokenize(text)) for text in (entry.title,) + entry.paraphrases if text))
        avg = {f: (sum(v) / len(v) if v else 0.0) or 1.0 for f, v in lengths.items()}
        return cls(
            ids=[e.id for e in entries], counts=counts, lengths=lengths, avg_length=avg, df=df,
            vocab=sorted(df), bigrams=bigrams, phrases=phrases, lines=lines, phrase_table=phrase_table(phrases),
        )

    def _expand(self, term: str) -> list[tuple[str, float]]:
        """The term itself if known, plus close spellings from the vocabulary (typos)."""
        from rapidfuzz import fuzz, process

        out = [(term, 1.0)] if term in self.df else []
        if len(term) >= _FUZZY_LEN and not term.isdigit():
            for cand, score, _ in process.extract(term, self.vocab, scorer=fuzz.ratio, limit=4,
                                                  score_cutoff=_FUZZY_MIN):
                if cand != term and abs(len(cand) - len(term)) <= 3:
                    out.append((cand, 0.8 * score / 100.0))
        return out

    def _idf(self, term: str) -> float:
        n, df = len(self.ids), self.df.get(term, 0)
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def idf(self, term: str) -> float:
        """How rare a term is across the entries (BM25's inverse document frequency): rarer says more."""
        return self._idf(term)

    def _phrase_matches(self, q_lower: str):
        """(entry index, phrase, fuzz.partial_ratio) for each phrase of 12+ characters that scores 85 or more
        against the query: one call into rapidfuzz's C loop, whose cut-off also lets it give up early."""
        from rapidfuzz import fuzz, process

        owners, phrases = [], []
        for i, entry_phrases in enumerate(self.phrases):
            for phrase in entry_phrases:
                if len(phrase) >= 12:
                    owners.append(i)
                    phrases.append(phrase)
        for phrase, ratio, k in process.extract(q_lower, phrases, scorer=fuzz.partial_ratio, score_cutoff=85,
                                                limit=None):
            yield owners[k], phrase, ratio

    def _phrase_bonuses(self, q_lower: str, best_possible: float) -> dict[int, float]:
        """Entry index -> its bonus for a pasted error message or a near-verbatim symptom."""
        best: dict[int, float] = {}
        for i, _phrase, ratio in self._phrase_matches(q_lower):
            best[i] = max(best.get(i, 0.0), best_possible * (ratio - 80) / 20.0)
        return best

    def _term_score(self, i: int, variant: str) -> float:
        """BM25 in each field of entry i, weighted by how much the field counts."""
        s = 0.0
        for name, weight in FIELD_WEIGHTS.items():
            tf = self.counts[name][i].get(variant, 0)
            if tf:
                norm = 1 - _B + _B * self.lengths[name][i] / self.avg_length[name]
                s += weight * tf * (_K1 + 1) / (tf + _K1 * norm)
        return s / 3.0

    @staticmethod
    def _line_share(line, units, parts, found, weight) -> float:
        """How much of the query (by idf) one line of the entry holds, a compound counted once; nothing when
        the line holds a single word of it, which says no more than the word's own score."""
        def held(t):
            return weight[t] * found[t][1] if t in found and found[t][0] in line else 0.0
        shares = [max(held(c), sum(held(p) for p in parts[c])) for c in units]
        return sum(shares) if sum(x > 0 for x in shares) >= 2 else 0.0

    def search(self, query: str, limit: int = 10, lines: bool = True) -> list[Hit]:
        """Entries best first. lines=False leaves out the bonus for the query's words sitting in one title or
        paraphrase: it suits a question in a user's words, not a failure line from a log (engine.possible)."""
        query = without_stock_advice(query)
        together: dict[str, str | None] = {}
        part_of: dict[str, str | None] = {}
        for term, other, of in _terms(query):
            together.setdefault(term, other)
            if of is None:
                part_of[term] = None  # said on its own somewhere: counts on its own
            else:
                part_of.setdefault(term, of)
        terms = list(together)
        if not terms:
            return []
        # a compound counts once: as itself or as its parts, whichever matches better (multi-gpu, set_epoch)
        units = [t for t in terms if part_of[t] is None]
        parts = {c: [t for t in terms if part_of[t] == c] for c in units}
        expanded = {t: self._expand(t) for t in terms}
        for t, other in together.items():
            if other in self.df and other not in dict(expanded[t]):
                expanded[t].append((other, 1.0))
        idf = {v: self._idf(v) for t in terms for v, _ in expanded[t]}
        weight = {t: max((idf[v] for v, _ in expanded[t]), default=0.0) for t in terms}
        q_words = _words(query)
        q_pairs = list(zip(q_words, q_words[1:]))
        q_lower = query.lower().strip()
        best_possible = sum(max(weight[c], sum(weight[p] for p in parts[c])) for c in units) or 1.0
        bonuses = self._phrase_bonuses(q_lower, best_possible) if len(q_lower) >= 12 else {}
        scores: list[tuple[float, int, tuple[str, ...]]] = []
        for i in range(len(self.ids)):
            matched, found, score = [], {}, {}
            for term in terms:
                term_best, hit = 0.0, None
                for variant, sim in expanded[term]:
                    s = sim * idf[variant] * self._term_score(i, variant)
                    if s > term_best:
                        term_best, hit = s, (variant, sim)
                if hit:
                    matched.append(term)
                    found[term] = hit
                    score[term] = term_best
            if not matched:
                continue
            total = sum(max(score.get(c, 0.0), sum(score.get(p, 0.0) for p in parts[c])) for c in units)
            covered = sum(1.0 if c in found or not parts[c] else
                          sum(p in found for p in parts[c]) / len(parts[c]) for c in units if c in found or
                          any(p in found for p in parts[c]))
            # terms adjacent in the query and in the entry: "address already", "docker0 nccl"
            total += _PAIR * sum(self._idf(a) for a, b in q_pairs if (a, b) in self.bigrams[i])
            # the query's words together in one line of the entry, not scattered over it
            line_best = 0.0 if not lines else max((self._line_share(line, units, parts, found, weight)
                                                    for line in self.lines[i]), default=0.0)
            total += _LINE * line_best
            # a pasted error message or a near-verbatim symptom
            total += bonuses.get(i, 0.0)
            coverage = covered / len(units)
            scores.append((total * (0.5 + 0.5 * coverage), i, tuple(matched)))
        scores.sort(key=lambda s: (-s[0], s[1]))
        scale = _SCALE_LINES if lines else _SCALE
        return [
            Hit(id=self.ids[i], score=round(1.0 - math.exp(-s / scale), 3), matched=m)
            for s, i, m in scores[:limit]
        ]
