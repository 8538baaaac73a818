# kiln's version, in one place: read by the package and by pyproject.toml.
# Depends on nothing.
__version__ = "0.1.0"
