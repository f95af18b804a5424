"""`python -m registry.cli`: the same as the `capreg` command."""

import sys

from registry.cli.local import main

if __name__ == "__main__":
    sys.exit(main())
