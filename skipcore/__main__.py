import sys

from skipcore.cli import main

sys.exit(main())
