import sys

from live.cli import main

sys.exit(main())
