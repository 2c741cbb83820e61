"""The package version (one place: the top-level package, the caches and mirage-config read it)."""
__version__ = "0.1.0"
