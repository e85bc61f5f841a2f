"""The MNIST model and the small helpers both example scripts share (plain PyTorch, nothing of torchjob)."""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A small CNN: two 5×5 convolutions with max-pooling, two linear layers. About 22k parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def to_dataset(images: Any, labels: Any) -> TensorDataset:
    """uint8 images (N, 28, 28) and labels → normalised float tensors (N, 1, 28, 28)."""
    x = torch.as_tensor(images, dtype=torch.float32).unsqueeze(1) / 255.0
    return TensorDataset((x - 0.1307) / 0.3081, torch.as_tensor(labels))


@torch.no_grad()
def evaluate(model: nn.Module, dataset: TensorDataset, device: torch.device | str = "cpu") -> float:
    """Accuracy on ``dataset``."""
    model.eval()
    correct = 0
    for x, y in DataLoader(dataset, batch_size=500):
        correct += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
    return correct / len(dataset)


def save_results(model: nn.Module, model_dir: str, metrics: dict[str, Any]) -> None:
    """Rank 0's outputs: the trained weights (``mnist_cnn.pt``) and a ``metrics.json`` summary."""
    os.makedirs(model_dir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(model_dir, "mnist_cnn.pt"))
    with open(os.path.join(model_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f)
