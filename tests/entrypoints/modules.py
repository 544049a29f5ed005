"""A no-op trainer that records what its trial process holds: ``run(config, ctx)`` reports
once, writes ``sorted(sys.modules)`` and the garbage collector's frozen object count to
``<trial_dir>/modules.json`` and returns. Stdlib only."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    ctx.report(0, {"score": 0.5})
    record = {"modules": sorted(sys.modules), "frozen": gc.get_freeze_count()}
    (Path(ctx.trial_dir) / "modules.json").write_text(json.dumps(record))
    return {"score": 0.5}
