"""`python -m harness`: see harness/cli/main.py."""

import sys

from harness.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
