"""The teacher's reference: a small MLP on a synthetic regression set, fed by a DataLoader whose
dataset rebuilds each sample in Python (the slow part the assignment asks to fix)."""

import argparse

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--work", type=int, default=150,
                    help="passes of Python over each sample's values")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)


class Samples(Dataset):
    """2,048 samples of a fixed linear target, each rebuilt element by element on access, in
    plain Python: the grader's torch.profiler run records no event for it (as torch operations,
    the slower student's 2.3M multiplications ran its profiled run out of memory)."""

    def __init__(self) -> None:
        self.x = torch.randn(2048, 32)
        self.y = self.x @ torch.linspace(-1, 1, 32).unsqueeze(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        values = self.x[index].tolist()
        for _ in range(args.work):
            values = [value * 1.0 for value in values]
        return torch.tensor(values), self.y[index]


def train() -> None:
    """Train for --steps optimizer steps; print the last loss."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(Samples(), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(1))
    step = 0
    while step < args.steps:
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    train()
