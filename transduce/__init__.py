"""transduce: neural character- and word-level transduction from the command line."""

__version__ = "0.3.1"
