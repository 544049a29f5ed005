"""Model builders: output shapes, kwargs checks, the registry and importable builders."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dvt_hpo.exceptions import SpecError
from dvt_hpo.train.config import ModelConfig
from dvt_hpo.train.models import build_model, register_model, registered_models


@pytest.mark.parametrize("builder", ["mlp", "cnn"])
@pytest.mark.parametrize(
    ("in_shape", "kwargs"),
    [
        ((1, 8, 8), {}),
        ((3, 32, 32), {"width": 8, "depth": 3, "dropout": 0.2}),
        ((1, 5, 7), {"width": 4, "depth": 4}),
    ],
)
def test_builders_give_one_logit_per_class(
    builder: str, in_shape: tuple[int, int, int], kwargs: dict[str, float]
) -> None:
    model = build_model(ModelConfig(builder, kwargs), in_shape, num_classes=5)
    out = model(torch.rand(3, *in_shape))
    assert out.shape == (3, 5)
    # A batch of one trains too (BatchNorm never sees a single value per channel).
    model.train()
    model(torch.rand(1, *in_shape)).sum().backward()


def test_width_and_depth_change_the_model() -> None:
    small = build_model(ModelConfig("cnn", {"width": 8, "depth": 1}), (1, 8, 8), 10)
    big = build_model(ModelConfig("cnn", {"width": 16, "depth": 3}), (1, 8, 8), 10)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(big) > 10 * count(small)
    mlp = build_model(ModelConfig("mlp", {"width": 7, "depth": 2}), (1, 8, 8), 10)
    assert [m.out_features for m in mlp.modules() if isinstance(m, nn.Linear)] == [7, 7, 10]


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (ModelConfig("resnet"), "model.builder", ["unknown model builder 'resnet'", "cnn, mlp"]),
        (
            ModelConfig("cnn", {"widht": 3}),
            "model.kwargs.widht",
            ["allowed: width, depth, dropout"],
        ),
        (ModelConfig("cnn", {"width": 0}), "model.kwargs.width", ["expected an int >= 1, got 0"]),
        (ModelConfig("mlp", {"dropout": 1.0}), "model.kwargs.dropout", ["0 <= dropout < 1"]),
        (ModelConfig("nosuch.module:build"), "model.builder", ["cannot import"]),
    ],
)
def test_bad_model_specs_name_the_field(spec: ModelConfig, field: str, words: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        build_model(spec, (1, 8, 8), 10)
    assert info.value.field == field
    for word in words:
        assert word in info.value.message


def linear_builder(in_shape: tuple[int, ...], num_classes: int, *, bias: bool = True) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], num_classes, bias=bias)
    )


def test_registered_and_importable_builders() -> None:
    register_model("test-linear")(linear_builder)
    assert "test-linear" in registered_models()
    model = build_model(ModelConfig("test-linear", {"bias": False}), (2, 3, 3), 4)
    assert model(torch.rand(2, 2, 3, 3)).shape == (2, 4)
    with pytest.raises(ValueError, match="already registered"):
        register_model("test-linear")(lambda in_shape, num_classes: nn.Identity())
    imported = build_model(ModelConfig(f"{__name__}:linear_builder"), (1, 2, 2), 3)
    assert imported(torch.rand(1, 1, 2, 2)).shape == (1, 3)


def test_builtin_model_names_are_the_registered_ones() -> None:
    """The orchestrator checks model.builder against BUILTIN_MODELS without importing torch."""
    from dvt_hpo.train import models
    from dvt_hpo.train.config import BUILTIN_MODELS

    own = [name for name, b in models._REGISTRY.items() if b.__module__ == models.__name__]
    assert sorted(own) == sorted(BUILTIN_MODELS)
