"""A script that trains ten steps, then fails: ``--crash error`` raises, ``--crash signal``
dies of SIGSEGV (as a broken extension would)."""

import argparse
import os
import signal

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--crash", choices=("error", "signal"), default="error")
args = parser.parse_args()
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(12):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    if step == 9 and args.crash == "signal":
        os.kill(os.getpid(), signal.SIGSEGV)
    if step == 9:
        raise RuntimeError(f"loss is nan at step {step}")
