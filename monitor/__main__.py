import sys

from monitor.runtime.cli import main

sys.exit(main())
