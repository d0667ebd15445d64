"""``python -m tokenmix.speed --case <json>``: one isolated case (started by :func:`run_isolated`)."""

import sys

from .measure import child_main

if __name__ == "__main__":
    sys.exit(child_main())
