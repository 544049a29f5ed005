"""``python -m dvt_hpo.trial PAYLOAD.json``: run one trial (alone or under torchrun)."""

import sys

from dvt_hpo.trial.main import main

sys.exit(main())
