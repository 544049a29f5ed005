"""Model builders by name: ``mlp`` and a small ``cnn``, plus any registered with
:func:`register_model` or named by an importable target (``"package.module:builder"``).

A builder is ``builder(in_shape, num_classes, **kwargs) -> torch.nn.Module`` where ``in_shape``
is ``(channels, height, width)`` of one sample and ``kwargs`` come from ``model.kwargs``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from dvt_hpo.exceptions import SpecError
from dvt_hpo.train.config import ModelConfig, import_target

__all__ = ["ModelBuilder", "build_model", "register_model", "registered_models"]

ModelBuilder = Callable[..., nn.Module]

_REGISTRY: dict[str, ModelBuilder] = {}


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Decorator: make ``builder`` available as ``model.builder: <name>``."""

    def decorate(builder: ModelBuilder) -> ModelBuilder:
        if name in _REGISTRY and _REGISTRY[name] is not builder:
            raise ValueError(f"a model builder named {name!r} is already registered")
        _REGISTRY[name] = builder
        return builder

    return decorate


def registered_models() -> list[str]:
    return sorted(_REGISTRY)


def _resolve(name: str) -> ModelBuilder:
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        obj = import_target(name, "model.builder")
        if not callable(obj):
            raise SpecError(f"{name!r} is not callable", field="model.builder")
        return obj
    raise SpecError(
        f"unknown model builder {name!r}; registered: {', '.join(registered_models())}, "
        "or an importable 'package.module:function'",
        field="model.builder",
    )


def build_model(spec: ModelConfig, in_shape: Sequence[int], num_classes: int) -> nn.Module:
    """Build ``spec.builder`` for samples of shape ``in_shape`` and ``num_classes`` outputs."""
    builder = _resolve(spec.builder)
    params = inspect.signature(builder).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if not takes_any:
        allowed = [
            n
            for n, p in params.items()
            if n not in ("in_shape", "num_classes")
            and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
        for key in spec.kwargs:
            if key not in allowed:
                raise SpecError(
                    f"model {spec.builder!r} takes no argument {key!r}; allowed: "
                    f"{', '.join(allowed)}",
                    field=f"model.kwargs.{key}",
                )
    return builder(tuple(in_shape), num_classes, **spec.kwargs)


def _check_positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(f"expected an int >= 1, got {value!r}", field=f"model.kwargs.{name}")


def _check_dropout(value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
        raise SpecError(f"expected 0 <= dropout < 1, got {value!r}", field="model.kwargs.dropout")


@register_model("mlp")
def mlp(
    in_shape: tuple[int, ...],
    num_classes: int,
    *,
    width: int = 128,
    depth: int = 2,
    dropout: float = 0.0,
) -> nn.Module:
    """Flatten, then ``depth`` hidden layers of ``width`` units (ReLU, dropout)."""
    _check_positive("width", width)
    _check_positive("depth", depth)
    _check_dropout(dropout)
    layers: list[nn.Module] = [nn.Flatten()]
    in_features = math.prod(in_shape)
    for _ in range(depth):
        layers += [nn.Linear(in_features, width), nn.ReLU(inplace=True), nn.Dropout(dropout)]
        in_features = width
    layers.append(nn.Linear(in_features, num_classes))
    return nn.Sequential(*layers)


@register_model("cnn")
def cnn(
    in_shape: tuple[int, ...],
    num_classes: int,
    *,
    width: int = 32,
    depth: int = 2,
    dropout: float = 0.0,
) -> nn.Module:
    """``depth`` blocks of conv3x3-BN-ReLU (channels ``width * 2**i``) with 2x2 max-pooling
    while the feature map is larger than 2x2, then global average pooling and a linear head.

    Pooling stops at 2x2 so BatchNorm always sees more than one value per channel, even for
    a last batch of one sample.
    """
    _check_positive("width", width)
    _check_positive("depth", depth)
    _check_dropout(dropout)
    channels, height, side_w = in_shape[0], in_shape[-2], in_shape[-1]
    layers: list[nn.Module] = []
    for i in range(depth):
        out = width * 2**i
        layers += [
            nn.Conv2d(channels, out, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out),
            nn.ReLU(inplace=True),
        ]
        if min(height, side_w) > 2:
            layers.append(nn.MaxPool2d(2))
            height, side_w = height // 2, side_w // 2
        channels = out
    layers += [
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(dropout),
        nn.Linear(channels, num_classes),
    ]
    return nn.Sequential(*layers)
