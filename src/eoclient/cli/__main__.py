"""``python -m eoclient.cli``: the ``eoclient`` command."""

import sys

from eoclient.cli import main

sys.exit(main())
