"""The catalogue of known distributed-training failures: schema, loader, lookup and search."""
