"""Tab completion in the REPL (:class:`WaveSQLCompleter`): keywords, catalog objects and
their columns, signal functions and Spark functions -- read from the live session and
refreshed after every statement, so DDL shows at once -- plus meta-commands, window words
after ``[`` and file paths inside ``'...'``.
"""

from __future__ import annotations

import re
import threading

from prompt_toolkit.completion import Completer, Completion

from wavesql.dialect import unclosed
from wavesql.repl.lexer import SQL_KEYWORDS, WAVESQL_KEYWORDS
from wavesql.repl.meta import META_ALIASES, META_COMMANDS

#: What can follow `[` after a stream or signal (CQL and sample windows).
_WINDOW_WORDS = ("NOW", "PARTITION", "RANGE", "ROWS", "SAMPLES")

_WORD = re.compile(r"([A-Za-z_][\w]*\.)?([\w]*)$")
_ALIAS = re.compile(r"\b(?:FROM|JOIN)\s+([A-Za-z_]\w*)(?:\s*\[[^\]]*\])?\s+(?:AS\s+)?"
                    r"([A-Za-z_]\w*)", re.IGNORECASE)
# After these words only a relation makes sense, so only catalog objects are offered; after
# DROP <kind> too (not after a bare STREAM: that is also the REPL's continuous-query prefix).
_RELATION_WORDS = {"FROM", "JOIN", "DESCRIBE", "TABLE", "INTO", "\\D", "\\DESCRIBE"}
_OBJECT_KINDS = {"STREAM", "SIGNAL", "VIEW", "SINK"}


class WaveSQLCompleter(Completer):
    """Completes keywords, catalog objects, columns and functions from a live session.

    :meth:`refresh` re-reads the catalog (a SQLite query) and the function list (cached by
    the session until DDL invalidates it); the REPL calls it after every statement.
    """

    def __init__(self, session=None):
        self.session = session
        self.objects: dict[str, str] = {}  # lower-cased name -> name as written
        self.kinds: dict[str, str] = {}  # lower-cased name -> STREAM / SIGNAL / VIEW / SINK
        self.columns: dict[str, list[str]] = {}  # lower-cased name -> column names
        self.signal_functions: dict[str, str] = {}  # name -> signature
        self.spark_functions: list[str] = []
        self.keywords = sorted(set(SQL_KEYWORDS) | set(WAVESQL_KEYWORDS))
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Re-read catalog objects, their columns and the function names."""
        if self.session is None:
            return
        objects, kinds, columns = {}, {}, {}
        for d in self.session.catalog.list():
            objects[d.key] = d.name
            kinds[d.key] = d.kind
            cols = getattr(d, "channels", None) or getattr(d, "columns", ())
            columns[d.key] = [c.name for c in cols]
        signal_functions = {}
        try:
            from wavesql.udfs import registry

            for f in registry.all():
                signal_functions[f.name] = f.signature()
        except Exception:  # noqa: BLE001 - completion must never break the REPL
            pass
        try:
            spark_functions = sorted(f for f in self.session.env.function_names()
                                     if re.fullmatch(r"[a-z_][a-z0-9_]*", f))
        except Exception:  # noqa: BLE001
            spark_functions = self.spark_functions
        with self._lock:
            self.objects, self.kinds, self.columns = objects, kinds, columns
            self.signal_functions = signal_functions
            self.spark_functions = [f for f in spark_functions if f not in signal_functions]

    # -- prompt_toolkit entry point --------------------------------------------------------
    def get_completions(self, document, complete_event):
        before = document.text_before_cursor
        match = _WORD.search(before)
        qualifier = (match.group(1) or "")[:-1]
        word = match.group(2)
        head = before[:match.start()]
        with self._lock:
            objects, kinds, columns = self.objects, self.kinds, self.columns
            signal_functions, spark_functions = self.signal_functions, self.spark_functions
        stripped = before.lstrip()

        # Inside a '...' string: a file path (CREATE STREAM ... FROM 'data/<Tab>).
        open_at = unclosed(before)
        if open_at is not None and before[open_at] == "'":
            from prompt_toolkit.completion import PathCompleter
            from prompt_toolkit.document import Document

            partial = before[open_at + 1:]
            yield from PathCompleter(expanduser=True).get_completions(
                Document(partial), complete_event)
            return

        # A meta-command name at the start of the buffer.
        if stripped.startswith("\\") and not re.search(r"\s", stripped):
            for name in list(META_COMMANDS) + list(META_ALIASES):
                if name.startswith(stripped):
                    yield Completion(name, -len(stripped), display_meta=META_COMMANDS.get(
                        META_ALIASES.get(name, name), ("", ""))[1])
            return

        # `name.` or `alias.`: the columns of that one object.
        if qualifier:
            target = qualifier.lower()
            if target not in columns:
                aliases = {a.lower(): n.lower() for n, a in _ALIAS.findall(document.text)}
                target = aliases.get(target, target)
            for col in columns.get(target, []):
                if col.lower().startswith(word.lower()):
                    yield Completion(col, -len(word), display_meta=f"column of "
                                     f"{objects.get(target, target)}")
            return

        # Right after `[`: a window, so only the words that open one.
        if head.rstrip().endswith("["):
            for kw in _WINDOW_WORDS:
                if kw.lower().startswith(word.lower()):
                    yield Completion(kw, -len(word), display_meta="window")
            return

        previous = [w.upper() for w in re.findall(r"[\\\w]+", head)]
        only_relations = bool(previous) and (previous[-1] in _RELATION_WORDS or (
            previous[-1] in _OBJECT_KINDS and previous[-2:-1] == ["DROP"]))

        def matches(candidate: str) -> bool:
            return candidate.lower().startswith(word.lower())

        seen: set[str] = set()

        def emit(text: str, meta: str):
            if text.lower() in seen or not matches(text):
                return None
            seen.add(text.lower())
            return Completion(text, -len(word), display_meta=meta)

        for key, name in objects.items():
            c = emit(name, kinds.get(key, "").lower())
            if c:
                yield c
        if only_relations or (not word and not complete_event.completion_requested):
            return
        in_query = {n.lower() for n, _ in _ALIAS.findall(document.text)} | {
            w.lower() for w in re.findall(r"\w+", document.text) if w.lower() in objects}
        # Columns of the objects the statement mentions first, then every other column.
        ordered = sorted(columns, key=lambda k: (k not in in_query, k))
        for key in ordered:
            for col in columns[key]:
                c = emit(col, f"column of {objects[key]}")
                if c:
                    yield c
        for name, signature in signal_functions.items():
            c = emit(name, signature)
            if c:
                yield c
        for name in spark_functions:
            c = emit(name, "function")
            if c:
                yield c
        lower = bool(word) and word == word.lower()
        for kw in self.keywords:
            c = emit(kw.lower() if lower else kw, "keyword")
            if c:
                yield c
