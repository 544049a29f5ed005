"""The toy with a switch: ``config["fault"]`` (a searched bool) selects ``fault_actions``.

Lets one study mix a faulting trial and a healthy one, with enqueued params.
"""

from __future__ import annotations

from typing import Any

from tests.entrypoints import toy


def run(config: dict[str, Any], ctx: Any) -> dict[str, float] | None:
    if config.get("fault"):
        config = {**config, "actions": config["fault_actions"]}
    return toy.run(config, ctx)
