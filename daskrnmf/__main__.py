"""``python -m daskrnmf``: the same as the ``daskrnmf`` command."""

import sys

from .cli import main

sys.exit(main())
