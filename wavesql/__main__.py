"""``python -m wavesql`` is the ``wavesql`` command."""

import sys

from wavesql.cli import main

sys.exit(main())
