"""gpudoctor.probes package."""
