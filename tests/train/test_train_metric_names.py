"""dvt_hpo.train.metric_names: the names the built-in trainer reports, known from its config
alone, are exactly those a real run reports, latency on and off. How ``validate`` uses them
(refusals, did-you-mean, searched choices): tests/spec/test_known_metrics.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dvt_hpo.train import run
from dvt_hpo.train.metric_names import LEARNED, MEASURED, known_metrics

TINY = {"epochs": 1, "data": {"max_samples": 80, "batch_size": 40}}


@pytest.mark.parametrize("latency", [True, False])
def test_the_known_names_are_what_a_run_reports(
    fake_ctx: Any, make_config: Callable[..., dict[str, Any]], latency: bool
) -> None:
    config = make_config(**TINY, eval={"latency": {"enabled": latency, "repeats": 1}})
    ctx = fake_ctx()
    returned = run(config, ctx)
    known = known_metrics(config)
    [(_, reported)] = ctx.reports
    assert set(reported) == known.epoch
    assert set(returned) - set(reported) == known.final == {"epochs_run"}
    assert ("latency_ms" in known.epoch) is latency


def test_latency_off_says_how_to_turn_it_on() -> None:
    off = known_metrics({"eval": {"latency": {"enabled": False}}})
    assert off.how == {"latency_ms": "set trainer.config.eval.latency.enabled: true"}
    assert off.epoch == {*LEARNED, *MEASURED} - {"latency_ms"}
    # Unset, latency is measured (the trainer config's default), and nothing is off.
    on = known_metrics({})
    assert on.epoch == {*LEARNED, *MEASURED} and on.how == {}


def test_messages_list_the_learned_names_first() -> None:
    known = known_metrics({})
    assert known.trainer == "the built-in trainer"
    assert known.listing(known.epoch | known.final) == (
        "loss, train_loss, accuracy, macro_f1, n_params, epoch_s, peak_memory_mb, latency_ms, "
        "epochs_run"
    )
