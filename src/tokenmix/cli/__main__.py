"""``python -m tokenmix.cli``: the ``tokenmix`` command."""

import sys

from . import main

sys.exit(main())
