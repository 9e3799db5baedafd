"""What a method or attribute of a class holds is read through its bases and its instances."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from conftest import loop_origin, project_scopes  # noqa: E402

#: A module of bases beside the script: a trainer base and a data module.
BASES = """\
from torch.utils.data import DataLoader


class BaseTrainer:
    def __init__(self, cfg):
        self.train_dl = DataLoader(cfg.train, batch_size=16, num_workers=3)

    def build_loader(self, split):
        return DataLoader(split, batch_size=32)


class DataModule:
    def __init__(self, cfg):
        self.val_dl = DataLoader(cfg.val, batch_size=5)

    def make_loader(self):
        return self.val_dl
"""

#: Classes inheriting methods and attributes, from the same file and from BASES.
INHERITING = """\
import torch.nn as nn
from bases import BaseTrainer, DataModule


class Root:
    def build_loader(self, split):
        return open(split)


class Left(Root):
    pass


class Right(Root):
    def build_loader(self, split):
        return DataLoader(split, batch_size=2)


class Diamond(Left, Right):
    def fit(self):
        for x, y in self.build_loader("val"):
            pass


class Trainer(Left, BaseTrainer):
    def fit(self):
        for x, y in self.build_loader("val"):
            pass
        for x, y in self.train_dl:
            pass


class Unshown(nn.Module, BaseTrainer):
    def fit(self):
        for x, y in self.build_loader("val"):
            pass
        for x, y in self.train_dl:
            pass
"""


def test_an_inherited_method_or_attribute_is_read_through_the_class_bases(
        tmp_path: Path) -> None:
    """``class Trainer(Left, BaseTrainer)`` calling ``self.build_loader()`` its base defines,
    or looping over ``self.train_dl`` a base's ``__init__`` assigns (BaseTrainer imported from
    bases.py): only the class's own methods were read, so each was no DataLoader shown (the
    call none, the attribute by its name alone). Now the bases are read in Python's method
    resolution order (C3: ``Diamond(Left, Right)`` finds Right's ``build_loader`` before
    Root's), a base's values read in its own file; a base the source does not show
    (``nn.Module``) shows nothing, and where it comes first the method is unknown."""
    scopes = project_scopes(tmp_path, {"train.py": INHERITING, "bases.py": BASES}, "train.py")
    source = INHERITING.splitlines()
    train = "DataLoader(cfg.train, batch_size=16, num_workers=3)"

    def origin(cls: str, offset: int) -> tuple[str | None, bool | None]:
        """dataloader_origin of the loop ``offset`` lines into ``cls``'s ``fit``."""
        opens = next(n for n, line in enumerate(source) if line.startswith(f"class {cls}("))
        fit = source.index("    def fit(self):", opens) + 1
        return loop_origin(source, scopes, fit, fit + offset)

    assert origin("Diamond", 1) == (
        "self.build_loader('val'), self.build_loader() = DataLoader(split, batch_size=2)", True)
    assert origin("Trainer", 1) == (
        "self.build_loader('val'), self.build_loader() = open(split)", False)
    assert origin("Trainer", 3) == (train, True)
    assert origin("Unshown", 1) == ("self.build_loader('val')", False)
    assert origin("Unshown", 3) == (train, True)


#: A trainer holding a data module, with a classmethod and a staticmethod.
HOLDING = """\
from torch.utils.data import DataLoader
from bases import DataModule


class Trainer:
    def __init__(self, cfg):
        self.data = DataModule(cfg)
        self.val_dl = open(cfg.log)
        self.loader = open(cfg.path)

    @classmethod
    def make(cls, cfg):
        return DataLoader(cfg.train, batch_size=64)

    @classmethod
    def run(cls, cfg):
        for x, y in cls.make(cfg):
            pass

    @staticmethod
    def loader_of(holder):
        return holder.loader

    def fit(self, cfg):
        for x, y in self.data.make_loader():
            pass
        for x, y in self.data.val_dl:
            pass
        for x, y in self.loader_of(cfg):
            pass
        data = DataModule(cfg)
        for x, y in data.make_loader():
            pass
"""


def test_a_method_of_a_class_or_of_an_instance_an_attribute_holds_is_followed(
        tmp_path: Path) -> None:
    """``cls.make(cfg)`` in a classmethod, and ``self.data.make_loader()`` or
    ``self.data.val_dl`` where ``self.data = DataModule(cfg)`` (imported from bases.py):
    an attribute of an attribute, or a method called on one, was not followed, so each was
    no DataLoader shown (by its name, or none for the call). Now the class the attribute
    holds an instance of is read: its method's value, the receiver written as the caller
    writes the instance (``self.data.val_dl``, not the trainer's own ``self.val_dl``, a
    file). A staticmethod's first parameter is no receiver: ``holder.loader`` is not the
    trainer's ``self.loader``."""
    scopes = project_scopes(tmp_path, {"train.py": HOLDING, "bases.py": BASES}, "train.py")
    source = HOLDING.splitlines()
    run = source.index("    def run(cls, cfg):")  # its decorator's line, as recorded
    fit = source.index("    def fit(self, cfg):") + 1
    val = "DataLoader(cfg.val, batch_size=5)"
    assert loop_origin(source, scopes, run, run + 2) == (
        "cls.make(cfg), cls.make() = DataLoader(cfg.train, batch_size=64)", True)
    assert loop_origin(source, scopes, fit, fit + 1) == (
        f"self.data.make_loader(), self.data.make_loader() = self.data.val_dl, "
        f"self.data.val_dl = {val}", True)
    assert loop_origin(source, scopes, fit, fit + 3) == (val, True)
    assert loop_origin(source, scopes, fit, fit + 5) == (
        "self.loader_of(cfg), self.loader_of() = holder.loader", True)
    assert loop_origin(source, scopes, fit, fit + 8) == (
        f"data.make_loader(), data.make_loader() = data.val_dl, data.val_dl = {val}", True)
