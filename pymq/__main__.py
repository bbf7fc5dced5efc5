"""``python -m pymq``: the same command line as the ``pymq`` script (:mod:`pymq.cli`)."""

from pymq.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
