"""A no-op trainer that records what its trial process imported: ``run(config, ctx)`` reports
once, writes ``sorted(sys.modules)`` to ``<trial_dir>/modules.json`` and returns. Stdlib only."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    ctx.report(0, {"score": 0.5})
    (Path(ctx.trial_dir) / "modules.json").write_text(json.dumps(sorted(sys.modules)))
    return {"score": 0.5}
