"""`python -m transduce` runs the command-line interface."""

from transduce.cli import main

main()
