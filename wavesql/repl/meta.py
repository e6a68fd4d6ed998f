"""The REPL's meta-commands: backslash commands answered by the REPL itself rather than by
the session (``\\streams``, ``\\d``, ``\\explain``, ``\\timing``, ``\\rows``,
``\\status``, ``\\stop``, ``\\help``, ``\\q``). They need no ``;``.

:data:`META_COMMANDS` is also what ``\\help`` lists, what Tab completes after a backslash
(:mod:`wavesql.repl.completion`) and what the README's table documents (a test compares
them).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from wavesql import render
from wavesql.errors import WaveSQLError
from wavesql.repl.jobs import Job
from wavesql.repl.streams import fmt_us

#: Meta-commands: name -> (argument synopsis, one-line help). The order is \help's order.
META_COMMANDS: dict[str, tuple[str, str]] = {
    "\\streams": ("", "list every catalog object (streams, signals, views, sinks)"),
    "\\d": ("[name]", "describe a stream, signal, view or sink (no name: like \\streams)"),
    "\\explain": ("[mode] <query>", "show the plan; mode IR (default), AST, SPARK, EXTENDED ..."),
    "\\timing": ("[on|off]", "toggle showing the elapsed time of each statement"),
    "\\rows": ("[n]", "show or set how many rows a result shows"),
    "\\status": ("[id]", "live figures of continuous queries (with an id: its last batch)"),
    "\\stop": ("[id|all]", "stop a background continuous query (default: all)"),
    "\\help": ("", "this help"),
    "\\q": ("", "quit (also Ctrl-D, `quit`, `exit`)"),
}
META_ALIASES = {"\\describe": "\\d", "\\?": "\\help", "\\h": "\\help", "\\quit": "\\q"}

EXPLAIN_MODES = ("AST", "IR", "SPARK", "EXTENDED", "FORMATTED", "CODEGEN", "COST")


class Quit(Exception):
    """Raised by ``\\q`` to leave the loop."""


class MetaCommands:
    """The part of :class:`wavesql.repl.shell.Repl` that runs meta-commands."""

    def _meta(self, text: str) -> None:
        """Run the meta-command ``text`` (``\\name [argument]``, a ``;`` at its end ignored)."""
        name, _, arg = text.partition(" ")
        if not arg and "\n" in name:
            name, _, arg = text.partition("\n")
        name = META_ALIASES.get(name.lower(), name.lower())
        arg = arg.strip().rstrip(";").strip()
        if name == "\\q":
            raise Quit
        if name == "\\help":
            self._print(self._help())
        elif name == "\\timing":
            self.timing = {"on": True, "off": False}.get(arg.lower(), not self.timing)
            self._print(f"Timing is {'on' if self.timing else 'off'}.")
        elif name == "\\rows":
            if arg:
                if not arg.isdigit() or int(arg) < 1:
                    self._print(Text(f"\\rows takes a positive number, got `{arg}`",
                                     style="red"))
                    return
                self.max_rows = int(arg)
            self._print(f"Results show up to {self.max_rows} rows.")
        elif name == "\\streams" or (name == "\\d" and not arg):
            self._print(self._objects_table())
        elif name == "\\d":
            self._run_job(lambda job: self._statements(
                job, f"DESCRIBE {arg}", [(0, f"DESCRIBE {arg}")]))
        elif name == "\\explain":
            self._run_job(lambda job: self._explain(job, arg))
        elif name == "\\status":
            self._run_job(lambda job: self._status(job, arg), progress=False)
        elif name == "\\stop":
            self._stop_command(arg)
        else:
            self._print(Text(f"unknown meta-command {name} (\\help lists them)", style="red"))

    def _help(self) -> Table:
        table = Table(show_header=False, box=None, padding=(0, 2))
        for name, (args, text) in META_COMMANDS.items():
            table.add_row(Text(f"{name} {args}".strip(), style="bold"), Text(text))
        table.add_row("", "")
        for usage, text in (
                ("<statement>;", "any WaveSQL / Spark SQL statement; Enter runs it once it "
                                 "ends with `;`"),
                ("STREAM <query>;", "run a continuous query, printing each micro-batch; "
                                    "Ctrl-C stops it"),
                ("STREAM BACKGROUND <query>;", "keep it running behind the prompt"),
                ("STREAM REAL-TIME INTO <sink> <query>;", "run a row-by-row query from a "
                 "Kafka stream to a Kafka sink in Spark's real-time mode, behind the prompt"),
                ("Tab / Ctrl-C / Ctrl-D", "complete / cancel the running query or clear the "
                                          "line / quit")):
            table.add_row(Text(usage, style="bold"), Text(text))
        return table

    def _objects_table(self) -> Table | Text:
        defs = self.session.catalog.list()
        if not defs:
            return Text("(the catalog is empty: CREATE STREAM / SIGNAL / VIEW / SINK adds "
                        "objects)", style="dim")
        table = Table(header_style="bold")
        for col in ("name", "kind", "format", "source", "columns", "details"):
            table.add_column(col, overflow="fold")
        for d in defs:
            cols = getattr(d, "channels", None) or getattr(d, "columns", ())
            source = getattr(d, "sql", None) or getattr(d, "path", "")
            table.add_row(Text(d.name, style="bold"), d.kind, Text(getattr(d, "format", "")),
                          Text(source), Text(", ".join(f"{c.name} {c.type}" for c in cols)),
                          Text(details(d)))
        return table

    def _explain(self, job: Job, arg: str) -> None:
        if not arg:
            job.emit(Text("usage: \\explain [mode] <query>", style="red"))
            return
        first, _, rest = arg.partition(" ")
        mode, query = (first.upper(), rest) if first.upper() in EXPLAIN_MODES and rest \
            else ("IR", arg)
        job.emit(Text(self.session.explain(query, mode)))

    def _status(self, job: Job, arg: str) -> None:
        if not self.background:
            job.emit(Text("no continuous queries are running (start one with "
                          "`STREAM BACKGROUND <query>;`)", style="dim"))
            return
        if arg and (not arg.isdigit() or int(arg) not in self.background):
            job.emit(Text(f"no continuous query `{arg}` (ids: "
                          f"{', '.join(map(str, self.background))})", style="red"))
            return
        table = Table(header_style="bold")
        for col in ("id", "state", "batches", "progress", "rows in", "late", "rows out",
                    "in/s", "processed/s", "kept", "latency p50/p99", "query"):
            table.add_column(col, justify="right" if col not in ("state", "progress", "query")
                             else "left", overflow="fold")
        chosen = [int(arg)] if arg else list(self.background)
        for ident in chosen:
            bg = self.background[ident]
            q = bg.query
            st = q.status()
            active = not bg.stopped and q.is_active
            state = "running" if active else "stopped"
            if q.error is not None:
                state = f"failed: {getattr(q.error, 'code', type(q.error).__name__)}"
            # live metrics (streaming/metrics.py): samples/s for signal queries, else rows/s
            unit = "samples" if st.get("input_samples_per_second") else "rows"

            def fig(v, fmt="{:.1f}"):
                return fmt.format(v) if v is not None else "-"

            table.add_row(str(ident), state, str(st["batches"]), fmt_us(st["progress_us"]),
                          str(st["rows_in"]), str(st["late"] + st["no_time"]),
                          str(st["rows_out"]), fig(st.get(f"input_{unit}_per_second")),
                          fig(st.get(f"processed_{unit}_per_second")),
                          f"{st['buffered']} rows, {st.get('state_bytes', 0):,} B",
                          f"{fig(st.get('latency_p50_s'), '{:.2f}')}/"
                          f"{fig(st.get('latency_p99_s'), '{:.2f}')} s", Text(bg.text))
        job.emit(table)
        if arg:
            bg = self.background[int(arg)]
            if bg.query.error is not None:
                job.emit(render.error_text(bg.query.error) if isinstance(bg.query.error, WaveSQLError)
                         else Text(str(bg.query.error), style="red"))
            if bg.last_batch is not None:
                job.emit(render.table(bg.last_columns, bg.last_rows, style=render.REPL,
                                      title=f"latest batch ({bg.last_batch})"))
                if bg.last_cut:
                    job.emit(render.count_note(len(bg.last_rows), True, None, render.REPL))

    def _stop_command(self, arg: str) -> None:
        if arg and arg.lower() != "all" and (not arg.isdigit()
                                             or int(arg) not in self.background):
            self._print(Text(f"no continuous query `{arg}`", style="red"))
            return
        which = [int(arg)] if arg.isdigit() else None
        # query.stop() talks to the JVM: run it as a job, off the main thread.
        done: list[int] = []
        self._run_job(lambda job: done.extend(self._stop_background(job, which)),
                      progress=False)
        self._print(f"stopped {', '.join(map(str, done))}" if done
                    else "nothing to stop")


def details(d) -> str:
    """The definition's time/rate facts for ``\\streams``."""
    parts = []
    if getattr(d, "event_time", None):
        parts.append(f"event time {d.event_time}")
    if getattr(d, "watermark_us", None) is not None:
        parts.append(f"watermark {d.watermark_us / 1e6:g} s")
    if getattr(d, "progress_column", None):
        parts.append(f"progress column {d.progress_column}")
    if getattr(d, "heartbeat_us", None) is not None:
        parts.append(f"heartbeat {d.heartbeat_us / 1e6:g} s")
    if getattr(d, "rate_hz", None) is not None:
        parts.append(f"{render.format_number(d.rate_hz)} Hz, segment {d.segment}")
    return ", ".join(parts)
