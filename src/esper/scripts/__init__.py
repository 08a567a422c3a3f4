"""Scripts: the command-line entry points (`esper ...` and `python -m esper.scripts.cli ...`)."""
