"""A training script as line_profiler tutorials write it: a bare ``@profile`` on ``train``."""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


@profile  # noqa: F821 (kernprof's builtin)
def train(loader, model, optimizer):
    for inputs, labels in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    print(f"tag={args.tag!r}")
    samples = args.steps * 16
    data = TensorDataset(torch.randn(samples, 32), torch.randint(0, 4, (samples,)))
    loader = DataLoader(data, batch_size=16, num_workers=args.num_workers)
    model = torch.nn.Linear(32, 4)
    train(loader, model, torch.optim.SGD(model.parameters(), lr=0.1))


if __name__ == "__main__":
    main()
