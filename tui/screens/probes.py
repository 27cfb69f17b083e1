"""Probes: an entry's probes or the whole check, live per-probe progress, Esc kills them, results and a busbw chart."""
from __future__ import annotations

import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Static

from gpudoctor.tui.messages import ProbeFinished, ProbesDone, WorkFailed
from gpudoctor.tui.work import background

WORDS = {"confirmed": ("fail", "bold red"), "ruled_out": ("pass", "green"), "inconclusive": ("warn", "yellow"),
         "skipped": ("skip", "dim"), "errored": ("error", "bold red")}
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class ProbeScreen(Screen):
    AUTO_FOCUS = "#probe-table"
    BINDINGS = [Binding("escape", "cancel_or_back", "Cancel / back"),
                Binding("c", "chart", "Chart", show=False)]

    def __init__(self, probe_ids: list[str] | None, entry_id: str | None = None) -> None:
        super().__init__()
        self.probe_ids = probe_ids
        self.entry_id = entry_id
        self.probes: list = []
        self.results: dict[str, object] = {}
        self.started = 0.0
        self.worker = None
        self.cancelled = False
        self.finished = False
        self.killer = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("", id="probe-status")
        yield DataTable(id="probe-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="probe-detail")
        yield Footer()

    def on_mount(self) -> None:
        from gpudoctor.probes import registry

        if self.entry_id:
            self.sub_title = f"probes for {self.entry_id}"
        elif self.probe_ids is None:
            self.sub_title = "check: every probe"
        else:
            self.sub_title = "probes: " + ", ".join(self.probe_ids)
        if self.probe_ids is None:
            self.probes = list(registry.PROBES)
        else:
            self.probes = [p for p in (registry.get(i) for i in self.probe_ids) if p is not None]
        table = self.query_one("#probe-table", DataTable)
        table.add_column("probe", key="probe", width=12)
        table.add_column("result", key="result", width=8)
        table.add_column("time", key="time", width=6)
        table.add_column("summary", key="summary")
        for probe in self.probes:
            table.add_row(probe.id, Text("queued", style="dim"), "", Text(probe.title, style="dim"), key=probe.id)
        self.start()

    def start(self) -> None:
        probes, options = list(self.probes), dict(self.app.probe_options)
        self.started = time.monotonic()

        def run() -> None:
            from gpudoctor.probes import session

            report = session.run(probes, options, parallel=4, on_done=lambda r: self.post_message(ProbeFinished(r)))
            self.post_message(ProbesDone(report.results, self.cancelled))

        self.worker = background(self, run, name="probes")
        self.ticker = self.set_interval(0.2, self.tick)

    def tick(self) -> None:
        table = self.query_one("#probe-table", DataTable)
        elapsed = time.monotonic() - self.started
        spin = SPINNER[int(elapsed * 5) % len(SPINNER)]
        for probe in self.probes:
            if probe.id not in self.results:
                table.update_cell(probe.id, "result", Text(f"{spin} run", style="cyan"))
                table.update_cell(probe.id, "time", f"{elapsed:4.1f}s")
        done = len(self.results)
        self.query_one("#probe-status", Label).update(
            f"{done}/{len(self.probes)} done · {elapsed:.1f} s · esc cancels and kills the probes")

    def on_probe_finished(self, message: ProbeFinished) -> None:
        result = message.result
        self.results[result.probe] = result
        word, style = WORDS.get(result.status.value, (result.status.value, ""))
        if self.cancelled and result.status.value == "errored":
            word, style = "killed", "bold red"
        table = self.query_one("#probe-table", DataTable)
        try:
            table.update_cell(result.probe, "result", Text(word, style=style))
            table.update_cell(result.probe, "time", f"{result.duration_s:4.1f}s")
            table.update_cell(result.probe, "summary", Text(result.summary))
        except Exception:  # a row for a probe we did not ask for (a launcher-side report): not shown
            pass
        if table.cursor_row is not None and self.probes and self.probes[table.cursor_row].id == result.probe:
            self.show_detail(result.probe)

    def on_probes_done(self, message: ProbesDone) -> None:
        self.finished = True
        self.ticker.stop()
        if self.killer is not None:
            self.killer.stop()
        counts: dict[str, int] = {}
        for result in message.results:
            word = WORDS.get(result.status.value, (result.status.value,))[0]
            counts[word] = counts.get(word, 0) + 1
        summary = ", ".join(f"{n} {w}" for w, n in counts.items())
        state = "cancelled: probe processes killed" if self.cancelled else "done"
        self.query_one("#probe-status", Label).update(f"{state} · {summary} · enter shows a row")
        if "collectives" in self.results:
            self.show_detail("collectives")

    def on_work_failed(self, message: WorkFailed) -> None:
        self.finished = True
        self.ticker.stop()
        self.query_one("#probe-status", Label).update(Text(message.error, style="bold red"))

    @on(DataTable.RowHighlighted, "#probe-table")
    @on(DataTable.RowSelected, "#probe-table")
    def row(self, event) -> None:
        self.show_detail(event.row_key.value)

    def show_detail(self, probe_id: str) -> None:
        from gpudoctor.engine.display import clean_for_display

        detail = self.query_one("#probe-detail", Static)
        result = self.results.get(probe_id)
        if result is None:
            detail.update("")
            return
        lines = [result.summary] + [clean_for_display(e) for e in result.evidence[:8]]
        if result.entries:
            lines.append("speaks to: " + ", ".join(result.entries))
        detail.update(Text("\n".join(lines)))
        if probe_id == "collectives" and (result.figures or {}).get("table"):
            self.show_chart(result.figures)

    def show_chart(self, figures: dict) -> None:
        from gpudoctor.tui.widgets.chart import BusbwChart

        charts = self.query(BusbwChart)
        chart = charts.first() if charts else None
        if chart is None:
            chart = BusbwChart(id="busbw")
            self.mount(chart, before=self.query_one(Footer))
        chart.show(figures)

    def action_chart(self) -> None:
        result = self.results.get("collectives")
        if result is not None and (result.figures or {}).get("table"):
            self.show_chart(result.figures)

    def action_cancel_or_back(self) -> None:
        if self.worker is not None and self.worker.is_running and not self.finished:
            self.cancel()
            return
        self.app.pop_screen()

    def cancel(self) -> None:
        """Kill every probe process group now; the runner then reports each as errored (killed)."""
        from gpudoctor.probes import runner

        self.cancelled = True
        runner.kill_all()
        self.worker.cancel()
        # probes still queued in the runner's pool start after this: keep killing until the run reports done
        self.killer = self.set_interval(0.1, runner.kill_all)
        self.query_one("#probe-status", Label).update("cancelling: killing the probes' processes…")

    def on_unmount(self) -> None:
        if not self.finished and self.worker is not None:
            from gpudoctor.probes import runner

            runner.kill_all()
