"""The version of transduce (here so that modules need not import the package root)."""

__version__ = "0.4.0"
