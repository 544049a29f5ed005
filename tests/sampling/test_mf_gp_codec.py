"""The multi-fidelity GP's inputs: configs to the unit cube and back, a conditional parameter at
ABSENT where its parent's choice leaves it out."""

from __future__ import annotations

import numpy as np
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from dvt_hpo.sampling.mf_gp_codec import Codec
from dvt_hpo.sampling.mf_gp_conditions import ABSENT, Rule

OPTIMIZER = CategoricalDistribution(["adam", "sgd", "rmsprop"])
MOMENTUM = FloatDistribution(0.0, 0.99)
# momentum is there for sgd and rmsprop (choices 1 and 2).
CONDITIONAL = Codec(
    {"lr": FloatDistribution(1e-4, 1e-1, log=True), "optimizer": OPTIMIZER, "momentum": MOMENTUM},
    {"momentum": Rule("optimizer", frozenset({1, 2}))},
)


def test_params_map_to_the_unit_cube_and_back() -> None:
    codec = Codec(
        {
            "lr": FloatDistribution(1e-4, 1e-1, log=True),
            "batch": IntDistribution(16, 512, log=True),
            "layers": IntDistribution(1, 5),
            "drop": FloatDistribution(0.0, 0.5, step=0.1),
            "act": CategoricalDistribution(["relu", "gelu", "silu"]),
        }
    )
    params = {"lr": 1e-3, "batch": 64, "layers": 3, "drop": 0.2, "act": "gelu"}
    row = codec.encode(params)
    assert codec.width == 7 and ((row >= 0) & (row <= 1)).all()
    decoded = codec.decode(row)
    assert decoded["lr"] == pytest.approx(1e-3) and decoded["drop"] == pytest.approx(0.2)
    assert {k: decoded[k] for k in ("batch", "layers", "act")} == {
        "batch": 64,
        "layers": 3,
        "act": "gelu",
    }
    rows = codec.random(np.random.default_rng(0), 200)
    snapped = codec.snap(rows)
    for row in snapped[:50]:
        d = codec.decode(row)
        assert np.allclose(codec.encode(d), row)  # every candidate is a config exactly
        assert d["batch"] == int(d["batch"]) and 16 <= d["batch"] <= 512
        assert round(d["drop"] * 10) == pytest.approx(d["drop"] * 10)


def test_a_parameter_its_parent_leaves_out_sits_at_absent() -> None:
    where = CONDITIONAL.slices["momentum"]
    row = CONDITIONAL.encode({"lr": 1e-3, "optimizer": "adam"})
    assert row is not None and row[where.start] == ABSENT
    assert CONDITIONAL.decode(row) == pytest.approx({"lr": 1e-3, "optimizer": "adam"})
    row = CONDITIONAL.encode({"lr": 1e-3, "optimizer": "sgd", "momentum": 0.9})
    assert row is not None and row[where.start] == pytest.approx(0.9 / 0.99)
    assert CONDITIONAL.decode(row)["momentum"] == pytest.approx(0.9)


def test_params_that_lack_what_their_choice_calls_for_have_no_row() -> None:
    # A trial still suggesting, or a rule the trials contradict: left out of the model.
    assert CONDITIONAL.encode({"lr": 1e-3, "optimizer": "rmsprop"}) is None
    assert CONDITIONAL.encode({"lr": 1e-3}) is None


def test_candidates_leave_out_what_their_choice_does() -> None:
    rows = CONDITIONAL.snap(CONDITIONAL.random(np.random.default_rng(0), 300))
    momentum = rows[:, CONDITIONAL.slices["momentum"].start]
    chosen = rows[:, CONDITIONAL.slices["optimizer"]].argmax(1)
    assert (momentum[chosen == 0] == ABSENT).all()
    assert len(set(momentum[chosen != 0])) > 100  # spread over its range where it applies
    for row in rows[:30]:
        params = CONDITIONAL.decode(row)
        assert ("momentum" in params) == (params["optimizer"] != "adam")
        assert np.allclose(CONDITIONAL.encode(params), row)
