"""``python -m skippy.cli``: the same as the ``skippy`` command."""

from skippy.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
