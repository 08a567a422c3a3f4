"""The command line: it parses flags, calls `esper.runs` and prints (`esper ...`, and
`python -m esper.scripts.cli ...` under `torchrun`)."""
