"""The catalogue: built-in entries plus user runbooks, cross-checked, looked up by forgiving ids, cached."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from gpudoctor.kb.model import SECTIONS, Entry
from gpudoctor.kb.record import field, record

BUILTIN_DIR = Path(__file__).resolve().parent
CACHE_FORMAT = 12  # bump when Entry, the index or this file's cache layout changes
_ID_PARTS = re.compile(r"^\s*([A-Za-z]+)[\s_-]*0*([0-9]+)\s*$")


def normalize_id(text: str) -> str | None:
    """'d8', 'D08', 'mn-3' -> 'D8', 'MN3'; None when it does not look like an id."""
    m = _ID_PARTS.match(text)
    if not m:
        return None
    return f"{m.group(1).upper()}{int(m.group(2))}"


def id_sort_key(entry: Entry) -> tuple:
    m = _ID_PARTS.match(entry.id)
    prefix, number = (m.group(1), int(m.group(2))) if m else (entry.id, 0)
    section = SECTIONS.index(entry.section) if entry.section in SECTIONS else len(SECTIONS)
    return (section, prefix, number)


@record
class Catalog:
    entries: dict[str, Entry]
    problems: list[str] = field(default_factory=list)
    index: object | None = None  # gpudoctor.kb.search.SearchIndex, built on demand, cached on its own
    rendered: dict[str, list] = field(default_factory=dict)  # id -> parsed Markdown blocks
    fingerprint: tuple | None = None  # of the files it was built from, for the side caches
    _derived: dict = field(default_factory=dict, repr=False, compare=False)  # per process, never pickled

    def __getstate__(self):
        # the search index and the parsed Markdown have cache files of their own: `diagnose` of a log
        # that matches unpickles neither, `show` only the Markdown
        state = dict(self.__dict__)
        state["index"] = None
        state["rendered"] = {}
        state["_derived"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("_derived", {})
        self.__dict__.update(state)

    def derived(self, name: str, build):
        """An object computed from the entries (a compiled pattern set), built once per process
        by `build(catalog)` and kept on the catalogue, never in its cache file."""
        value = self._derived.get(name)
        if value is None:
            value = self._derived[name] = build(self)
        return value

    def probes_of(self, entry_id: str) -> tuple[str, ...]:
        """The probe ids an entry lists (its YAML `probes:`), the one place that mapping lives."""
        entry = self.get(entry_id)
        return tuple(entry.probes) if entry is not None else ()

    def probe_map(self) -> dict[str, tuple[str, ...]]:
        """entry id -> the probes it lists, for every entry that lists any."""
        return {e.id: tuple(e.probes) for e in self.entries.values() if e.probes}

    def titles(self) -> dict[str, str]:
        return {e.id: e.title for e in self.entries.values()}

    def markdown(self, entry: Entry, *, links: bool = True) -> str:
        from gpudoctor.kb.markdown import entry_to_markdown

        return entry_to_markdown(entry, self.titles(), links=links)

    def blocks(self, entry: Entry) -> list:
        """The entry parsed for the terminal; cached so that `show` never imports the parser."""
        if entry.id not in self.rendered:
            if not self.rendered:
                self.rendered.update(self._side_cache("rendered.pickle") or {})
        if entry.id not in self.rendered:
            from gpudoctor.kb.mdblocks import parse_blocks

            self.rendered[entry.id] = parse_blocks(self.markdown(entry, links=False))
        return self.rendered[entry.id]

    def prepare(self) -> None:
        """Do once, before caching, the work every later run would otherwise repeat."""
        self.search_index()
        for entry in self.entries.values():
            self.blocks(entry)
        path = _cache_path("rendered.pickle")
        if path is not None and self.fingerprint is not None:
            _write_cache(path, (self.fingerprint, self.rendered))

    def _side_cache(self, name: str):
        """What a side cache file holds, when it was written for the files this catalogue was built from."""
        path = _cache_path(name)
        if path is None or self.fingerprint is None:
            return None
        try:
            stored_fp, value = _read_cache(path)
        except Exception:  # missing, stale or damaged: the caller builds it again
            return None
        return value if stored_fp == self.fingerprint else None

    def __iter__(self):
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, text: str) -> Entry | None:
        """An entry by id, case- and zero-padding-insensitive; also accepts a guide's name."""
        key = normalize_id(text)
        if key and key in self.entries:
            return self.entries[key]
        wanted = text.strip().lower()
        for entry in self.entries.values():
            if entry.section == "guides" and wanted and wanted in entry.title.lower():
                return entry
        return None

    def closest(self, text: str, limit: int = 3) -> list[Entry]:
        """Entries whose id or title is nearest to an unknown id."""
        from rapidfuzz import fuzz, process, utils

        key = normalize_id(text) or text.strip().upper()
        choices = {e.id: e.id for e in self.entries.values()}
        by_id = process.extract(key, choices, scorer=fuzz.ratio, limit=limit)
        by_title = process.extract(
            text, {e.id: e.title for e in self.entries.values()}, scorer=fuzz.WRatio,
            processor=utils.default_process, limit=limit,
        )
        ranked: dict[str, float] = {}
        for _, score, eid in by_id + by_title:
            ranked[eid] = max(ranked.get(eid, 0.0), score)
        best = sorted(ranked, key=lambda eid: (-ranked[eid], id_sort_key(self.entries[eid])))
        return [self.entries[eid] for eid in best[:limit]]

    def search_index(self):
        if self.index is None:
            self.index = self._side_cache("search-index.pickle")
            if self.index is not None:
                return self.index
            from gpudoctor.kb.search import SearchIndex

            path = _cache_path("search-index.pickle")
            self.index = SearchIndex.build(self.entries.values())
            if path is not None and self.fingerprint is not None:
                _write_cache(path, (self.fingerprint, self.index))
        return self.index


def user_dirs(extra: list[str] | None = None) -> list[Path]:
    """User runbook folders: GPUDOCTOR_KB (os.pathsep-separated) then --kb, later ones win."""
    dirs = [Path(p) for p in os.environ.get("GPUDOCTOR_KB", "").split(os.pathsep) if p.strip()]
    dirs += [Path(p) for p in (extra or [])]
    return dirs


def _entry_files(root: Path) -> list[Path]:
    return [Path(p) for p, _ in _yaml_files(str(root))]


def _yaml_files(root: str) -> list[tuple[str, os.stat_result]]:
    """(path, stat) of every YAML file under root, sorted; os.scandir keeps start-up cheap."""
    found: list[tuple[str, os.stat_result]] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():
                    stack.append(entry.path)
                elif entry.name.endswith((".yaml", ".yml")) and entry.is_file():
                    found.append((entry.path, entry.stat()))
            except OSError:
                continue
    return sorted(found)


def _display(path: Path, root: Path, builtin: bool) -> str:
    if builtin:
        return "kb/" + path.relative_to(root).as_posix()
    return str(path)


# the code whose output the caches hold: an upgrade or an edit of any of them (the search's synonyms, the
# Markdown renderer) makes the cached catalogue, index and renderings stale even where no YAML changed
_CODE = ("catalog.py", "loader.py", "model.py", "record.py", "search.py", "literals.py", "markdown.py", "mdblocks.py")


def _fingerprint(roots: list[tuple[Path, bool]]) -> tuple:
    parts = []
    here = Path(__file__).parent
    for name in _CODE:
        try:
            st = os.stat(here / name)
            parts.append((name, st.st_mtime_ns, st.st_size))
        except OSError:
            parts.append((name, "missing"))
    for root, builtin in roots:
        if not root.is_dir():
            parts.append((str(root), "missing"))
            continue
        for path, st in _yaml_files(str(root)):
            parts.append((path, st.st_mtime_ns, st.st_size))
    return (CACHE_FORMAT, sys.version_info[:2], tuple(parts))


def cache_dir() -> Path | None:
    """Where gpudoctor keeps derived data (parsed catalogue, compiled pattern database)."""
    if os.environ.get("GPUDOCTOR_NO_CACHE"):
        return None
    if os.environ.get("GPUDOCTOR_CACHE_DIR"):
        return Path(os.environ["GPUDOCTOR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "gpudoctor"


def _cache_path(name: str = "catalog.pickle") -> Path | None:
    """One set of cache files per installed copy, named by where its catalogue lives: two installs (a venv per
    project, a checkout beside a wheel) would otherwise overwrite each other's cache on every run."""
    root = cache_dir()
    if root is None:
        return None
    tag = 0x811C9DC5  # FNV-1a of the folder's path: stable across runs, no module to import
    for byte in str(BUILTIN_DIR).encode():
        tag = ((tag ^ byte) * 0x01000193) & 0xFFFFFFFF
    stem, dot, ext = name.rpartition(".")
    return root / f"{stem}-{tag:08x}{dot}{ext}"


def build_catalog(roots: list[tuple[Path, bool]]) -> Catalog:
    """Load every file; a broken file becomes a problem line and never hides the others."""
    from gpudoctor.kb.loader import KBError, load_file

    entries: dict[str, Entry] = {}
    problems: list[str] = []
    for root, builtin in roots:
        if not root.is_dir():
            problems.append(f"{root}: runbook folder not found")
            continue
        for path in _entry_files(root):
            display = _display(path, root, builtin)
            try:
                entry = load_file(path, display, origin="builtin" if builtin else "user")
            except KBError as exc:
                problems.extend(str(e) for e in exc.all())
                continue
            previous = entries.get(entry.id)
            if previous is not None and previous.origin == entry.origin == "builtin":
                problems.append(f"{display}: id: duplicate id {entry.id!r} (also in {previous.source})")
                continue
            entries[entry.id] = entry
    for entry in list(entries.values()):
        for i, rel in enumerate(entry.related):
            if rel.id not in entries:
                problems.append(f"{entry.source}: related[{i}]: unknown id {rel.id!r}")
        for i, target in enumerate(entry.explains):
            if target not in entries:
                problems.append(f"{entry.source}: explains[{i}]: unknown id {target!r}")
    ordered = dict(sorted(entries.items(), key=lambda kv: id_sort_key(kv[1])))
    return Catalog(entries=ordered, problems=problems)


def load_catalog(extra_dirs: list[str] | None = None, *, use_cache: bool = True) -> Catalog:
    """The built-in catalogue merged with user runbooks, from cache when nothing changed."""
    roots = [(BUILTIN_DIR, True)] + [(d, False) for d in user_dirs(extra_dirs)]
    cache = _cache_path() if use_cache else None
    fingerprint = _fingerprint(roots)
    if cache is not None:
        try:
            stored_fp, catalog = _read_cache(cache)
            if stored_fp == fingerprint:
                return catalog
        except Exception:  # a missing, stale or corrupt cache is rebuilt
            pass
    catalog = build_catalog(roots)
    catalog.fingerprint = fingerprint
    if cache is not None:
        catalog.prepare()  # built once here so that cached runs never pay for it
        _write_cache(cache, (fingerprint, catalog))
    return catalog


def _read_cache(path: Path):
    """Unpickle a cache file with the cyclic garbage collector paused: unpickling allocates thousands of
    objects, which would set off several collections (about half the load time) that find nothing."""
    import gc

    try:
        from _pickle import loads  # CPython's unpickler alone: the pickle module costs a millisecond to import
    except ImportError:
        from pickle import loads
    with open(path, "rb") as fh:
        data = fh.read()
    paused = gc.isenabled()
    gc.disable()
    try:
        return loads(data)
    finally:
        if paused:
            gc.enable()


def _write_cache(path: Path, payload: object) -> None:
    import pickle
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".catalog-", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home still gets a working, uncached catalogue
