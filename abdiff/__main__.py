"""`python -m abdiff ...`: the `abdiff` command, for where the entry point is not on PATH.

Where a write token is (the posting step of docs/ci.md), run it as `python -I -m
abdiff` from a folder outside any checkout: without -I, Python puts the current
folder first on the import path and reads PYTHON* variables and the user's
site-packages, so a pull request's `abdiff/` folder, `sitecustomize.py` or `.pth`
file would be imported in place of the installed abdiff.
"""

from abdiff.cli import command

if __name__ == "__main__":
    command()
