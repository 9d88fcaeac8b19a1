"""`python -m ibpath_scapy`: the `ibpath` command."""

import sys

from .cli.main import main

sys.exit(main())
