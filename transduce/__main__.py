"""`python -m transduce` runs the command-line interface."""

from transduce.cli import app

app(prog_name="transduce")
