"""profreport: tells you why your PyTorch training is slow."""

__version__ = "0.1.0"
