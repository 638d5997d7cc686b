"""``python -m skippy``: the same as the ``skippy`` command."""

from skippy.cli import main

if __name__ == "__main__":
    main(prog_name="skippy")
