import sys

from dvt_hpo.cli import main

sys.exit(main())
