"""A DDP script as the PyTorch tutorials write it, driving torch.profiler itself: ``profile``
imported by name (kernprof's auto-profiling must not collide with it), traces to ./tb_traces."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(model, loader, optimizer, prof):
    for inputs, labels in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
        prof.step()


def main():
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(192, 32), torch.randint(0, 4, (192,)))
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
    model = DistributedDataParallel(torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler("./tb_traces")) as prof:
        train(model, loader, optimizer, prof)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
