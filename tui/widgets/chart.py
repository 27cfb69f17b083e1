"""Bus bandwidth against message size for the collectives probe, drawn by textual-plotext."""
from __future__ import annotations

from textual_plotext import PlotextPlot


def busbw_points(figures: dict) -> tuple[list[float], list[float]]:
    """(log2 of the message size, busbw GB/s) from the collectives probe's figures table."""
    import math

    xs, ys = [], []
    for row in figures.get("table") or []:
        if row.get("bytes") and row.get("busbw_gbs") is not None:
            xs.append(math.log2(row["bytes"]))
            ys.append(float(row["busbw_gbs"]))
    return xs, ys


class BusbwChart(PlotextPlot):
    DEFAULT_CSS = """
    BusbwChart { height: 1fr; min-height: 8; }
    """

    points = 0

    def show(self, figures: dict) -> int:
        """Plot the sweep; returns the number of points drawn."""
        from gpudoctor.probes.sweep import human_bytes

        xs, ys = busbw_points(figures)
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(f"all_reduce busbw, {figures.get('world_size', '?')} {figures.get('backend', '')} ranks")
        plt.xlabel("message size")
        plt.ylabel("GB/s")
        if xs:
            plt.plot(xs, ys, marker="braille", color="cyan")
            ticks = xs[:: max(1, len(xs) // 6)]
            plt.xticks(ticks, [human_bytes(int(2 ** x)) for x in ticks])
        self.points = len(xs)
        self.refresh()
        return self.points
