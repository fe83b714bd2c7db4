import sys

from skipcore.commands import main

sys.exit(main())
