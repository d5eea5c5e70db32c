import sys

from relay.app.cli import main

sys.exit(main())
