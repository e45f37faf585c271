"""``python -m gradcheck``: the same command line as ``gradcheck``."""

from gradcheck.cli import main

main(prog_name="gradcheck")
