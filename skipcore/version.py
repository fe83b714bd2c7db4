"""The library version, apart from the package root so modules can read it without importing everything."""

__version__ = "0.1.0"
