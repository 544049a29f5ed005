"""A plain PyTorch training script (argparse, an MLP on scikit-learn's 8x8 digits). The only
line about the study is the ``report`` call per epoch, which prints when run by hand:

    python train.py --lr 0.003 --hidden 64
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dvt_hpo.report import report


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled digits (1797 images, 10 classes), read from its file: importing
    scikit-learn would add seconds to every trial's start."""
    spec = importlib.util.find_spec("sklearn")
    assert spec is not None and spec.submodule_search_locations, "scikit-learn is needed"
    folder = Path(list(spec.submodule_search_locations)[0], "datasets", "data")
    data = np.loadtxt(folder / "digits.csv.gz", delimiter=",")
    x = torch.tensor(data[:, :-1] / 16.0, dtype=torch.float32)
    return x, torch.tensor(data[:, -1], dtype=torch.long)


def macro_f1(pred: torch.Tensor, target: torch.Tensor, classes: int = 10) -> float:
    f1 = []
    for c in range(classes):
        tp = ((pred == c) & (target == c)).sum().item()
        fp = ((pred == c) & (target != c)).sum().item()
        fn = ((pred != c) & (target == c)).sum().item()
        f1.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(f1) / classes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    x, y = load_digits()
    order = torch.randperm(len(x))
    val, train = order[: len(x) // 5], order[len(x) // 5 :]
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        model.train()
        for batch in train[torch.randperm(len(train))].split(args.batch_size):
            optimizer.zero_grad()
            loss_fn(model(x[batch]), y[batch]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x[val])
        report(
            epoch,
            macro_f1=macro_f1(logits.argmax(1), y[val]),
            loss=loss_fn(logits, y[val]).item(),
        )


if __name__ == "__main__":
    main()
