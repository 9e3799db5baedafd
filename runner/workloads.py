"""The built-in workloads: the PyTorch MNIST example network and data, and ResNet-18 on CIFAR-shaped
images.

Data come from real MNIST IDX files when ``--data-dir`` holds them (torchvision's ``MNIST/raw``
layout, gzipped or not); otherwise an MNIST-shaped set is generated from a fixed seed, and the
manifest says so. The per-sample transform runs in ``Dataset.__getitem__`` so the DataLoader does
the real work a training loader does: decode to float, augment, normalise.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from profreport.errors import InputError, MissingToolError

#: MNIST's mean and standard deviation, as in the PyTorch example's Normalize((0.1307,), (0.3081,)).
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
#: Elastic distortion of Simard et al. (2003), the classic MNIST augmentation: displacement
#: fields of strength alpha (pixels) smoothed by a Gaussian of width sigma.
ELASTIC_ALPHA, ELASTIC_SIGMA = 34.0, 4.0
#: Random affine augmentation: rotation up to this many degrees, shift up to this image fraction.
AFFINE_DEGREES, AFFINE_SHIFT = 15.0, 0.1
#: CIFAR-10 images are 32x32; ResNet-18 takes 224x224 crops of images resized to 256.
CIFAR_SIZE, RESIZE_SIZE, CROP_SIZE = 32, 256, 224
IDX_UBYTE = 0x08
IMAGES_FILE, LABELS_FILE = "train-images-idx3-ubyte", "train-labels-idx1-ubyte"


@dataclass(frozen=True)
class TrainingData:
    """Images (N, H, W[, C]) as uint8, labels (N,) as int64, and a sentence saying where from."""

    images: np.ndarray
    labels: np.ndarray
    source: str


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (``.gz`` or plain) of unsigned bytes into an array of its shape."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read IDX file: {exc}", path) from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != IDX_UBYTE:
        raise InputError("not an IDX file of unsigned bytes (bad magic number)", path)
    ndim = data[3]
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    offset = 4 + 4 * ndim
    if len(data) - offset != math.prod(dims):
        raise InputError(f"IDX file holds {len(data) - offset} bytes, header says {dims}", path)
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def find_idx(data_dir: Path, stem: str) -> Path | None:
    """The IDX file ``stem`` (or ``stem.gz``) in ``data_dir`` or its ``MNIST/raw`` folder."""
    for folder in (data_dir, data_dir / "MNIST" / "raw", data_dir / "raw"):
        for name in (stem, f"{stem}.gz"):
            if (folder / name).is_file():
                return folder / name
    return None


def generated_images(count: int, shape: tuple[int, ...], seed: int) -> TrainingData:
    """A deterministic data set of random uint8 images and labels of 10 classes."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(count, *shape), dtype=np.uint8)
    labels = rng.integers(0, 10, size=count).astype(np.int64)
    return TrainingData(images, labels, "")


def load_mnist(data_dir: Path | None, count: int, seed: int) -> TrainingData:
    """Real MNIST training images from ``data_dir``, else ``count`` generated MNIST-shaped ones."""
    images_path = find_idx(data_dir, IMAGES_FILE) if data_dir else None
    labels_path = find_idx(data_dir, LABELS_FILE) if data_dir else None
    if images_path and labels_path:
        images, labels = read_idx(images_path), read_idx(labels_path).astype(np.int64)
        if images.ndim != 3 or len(images) != len(labels):
            raise InputError("MNIST images and labels do not match", images_path)
        return TrainingData(images, labels, f"MNIST IDX files in {images_path.parent}")
    generated = generated_images(count, (28, 28), seed)
    where = data_dir if data_dir else "(no --data-dir given)"
    source = f"generated (MNIST-shaped, {count} samples): no MNIST files in {where}"
    return TrainingData(generated.images, generated.labels, source)


def gaussian_kernel(sigma: float) -> torch.Tensor:
    """A normalised 1-D Gaussian of ``8 * sigma + 1`` taps (torchvision's ElasticTransform size)."""
    size = int(8 * sigma + 1)
    x = torch.arange(size, dtype=torch.float32) - size // 2
    kernel = torch.exp(-(x**2) / (2 * sigma**2))
    return kernel / kernel.sum()


class MnistAugmented(Dataset):
    """MNIST with ToTensor + elastic distortion + random affine + Normalize per sample."""

    def __init__(self, data: TrainingData, augment: bool, seed: int) -> None:
        """Keep the arrays; ``augment`` switches the elastic and affine distortions on."""
        self.images = torch.from_numpy(np.ascontiguousarray(data.images))
        self.labels = torch.from_numpy(data.labels)
        self.augment = augment
        self.seed = seed
        self.kernel = gaussian_kernel(ELASTIC_SIGMA)
        identity = torch.eye(2, 3).unsqueeze(0)
        self.identity_grid = F.affine_grid(identity, (1, 1, 28, 28), align_corners=False)

    def __len__(self) -> int:
        """Number of samples."""
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One normalised (1, 28, 28) float image and its label."""
        image = self.images[index].float().div(255).view(1, 1, 28, 28)
        if self.augment:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
            image = F.grid_sample(image, self.distortion_grid(generator), align_corners=False)
        return image[0].sub(MNIST_MEAN).div(MNIST_STD), self.labels[index]

    def distortion_grid(self, generator: torch.Generator) -> torch.Tensor:
        """A sampling grid: a random rotation and shift, plus a smoothed random displacement."""
        angle = math.radians((torch.rand(1, generator=generator).item() * 2 - 1) * AFFINE_DEGREES)
        shift = (torch.rand(2, generator=generator) * 2 - 1) * AFFINE_SHIFT * 2
        theta = torch.tensor([[math.cos(angle), -math.sin(angle), shift[0].item()],
                              [math.sin(angle), math.cos(angle), shift[1].item()]])
        affine = F.affine_grid(theta.unsqueeze(0), (1, 1, 28, 28), align_corners=False)
        field = torch.rand(1, 2, 28, 28, generator=generator) * 2 - 1
        pad = self.kernel.numel() // 2
        row = self.kernel.view(1, 1, 1, -1).expand(2, 1, 1, -1)
        field = F.conv2d(F.pad(field, (pad, pad, 0, 0), mode="reflect"), row, groups=2)
        column = self.kernel.view(1, 1, -1, 1).expand(2, 1, -1, 1)
        field = F.conv2d(F.pad(field, (0, 0, pad, pad), mode="reflect"), column, groups=2)
        displacement = field.permute(0, 2, 3, 1) * (ELASTIC_ALPHA * 2 / 28)
        return affine + displacement


class MnistNet(nn.Module):
    """The PyTorch MNIST example network; ``width`` scales the convolution channels."""

    def __init__(self, width: float = 1.0) -> None:
        """conv 32 -> conv 64 -> max-pool -> dropout -> fc 128 -> dropout -> fc 10."""
        super().__init__()
        channels1, channels2 = max(1, round(32 * width)), max(1, round(64 * width))
        self.conv1 = nn.Conv2d(1, channels1, 3, 1)
        self.conv2 = nn.Conv2d(channels1, channels2, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(channels2 * 12 * 12, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the 10 classes."""
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


class CifarResized(Dataset):
    """CIFAR-shaped 32x32 RGB images resized to 256 and randomly cropped to 224, normalised."""

    def __init__(self, data: TrainingData, seed: int) -> None:
        """Keep the arrays (N, 32, 32, 3) uint8."""
        self.images = torch.from_numpy(np.ascontiguousarray(data.images)).permute(0, 3, 1, 2)
        self.labels = torch.from_numpy(data.labels)
        self.seed = seed

    def __len__(self) -> int:
        """Number of samples."""
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One (3, 224, 224) float image and its label."""
        image = self.images[index : index + 1].float().div(255)
        image = F.interpolate(image, size=(RESIZE_SIZE, RESIZE_SIZE), mode="bilinear",
                              align_corners=False)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        top, left = torch.randint(0, RESIZE_SIZE - CROP_SIZE + 1, (2,), generator=generator)
        crop = image[0, :, top : top + CROP_SIZE, left : left + CROP_SIZE]
        return crop.sub(0.5).div(0.25), self.labels[index]


def require_workload(name: str) -> None:
    """Raise MissingToolError when the workload's libraries are not installed."""
    if name == "resnet18" and importlib.util.find_spec("torchvision") is None:
        raise MissingToolError("resnet18 needs torchvision, which is not installed")


def build_workload(name: str, data_dir: Path | None, samples: int, seed: int, augment: bool,
                   width: float) -> tuple[nn.Module, Dataset, str]:
    """The model, the training data set, and where the data came from."""
    require_workload(name)
    if name == "mnist":
        data = load_mnist(data_dir, samples, seed)
        return MnistNet(width), MnistAugmented(data, augment, seed), data.source
    import torchvision

    data = generated_images(samples, (CIFAR_SIZE, CIFAR_SIZE, 3), seed)
    source = f"generated (CIFAR-10-shaped, {samples} samples)"
    return torchvision.models.resnet18(num_classes=10), CifarResized(data, seed), source
