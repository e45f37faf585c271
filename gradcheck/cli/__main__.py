"""``python -m gradcheck.cli``: the command line, as ``python -m gradcheck``."""

from gradcheck.cli import main

main(prog_name="gradcheck")
