"""gpudoctor.tui: the interactive session; make_app() builds it for the CLI, the tests and the benchmarks."""
from __future__ import annotations


def make_app(catalog=None, *, logs: list[str] | None = None, script: str | None = None,
             names: dict[str, str] | None = None, probe_options: dict | None = None, kb_dirs=None,
             cmd: str | None = None):
    """The app, ready to run(): with logs it opens on their diagnosis. Loads the catalogue when not given one."""
    from gpudoctor.tui.app import GpuDoctorApp

    if catalog is None:
        from gpudoctor.kb.catalog import load_catalog

        catalog = load_catalog(kb_dirs)
    return GpuDoctorApp(catalog, logs=logs, script=script, names=names, probe_options=probe_options, cmd=cmd)
