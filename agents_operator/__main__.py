"""`python -m agents_operator`: the same as the `agents-operator` command."""

import sys

from agents_operator.cli import main

sys.exit(main())
