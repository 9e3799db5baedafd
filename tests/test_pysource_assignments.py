"""What a name holds is read from its assignment first; its name tells only where none does."""

from __future__ import annotations

from profreport import pysource


def test_an_assignment_wins_over_a_name_that_says_it_holds_a_loader() -> None:
    """``train_loader = open(path)`` then ``for line in train_loader:``, or ``val_loaders =
    [open(a), open(b)]`` then ``zip(*val_loaders)``: the name said DataLoader before the
    assignment was read, so a loop over files was taken for the DataLoader loop and its time
    for the DataLoader wait. The assignment shown wins; the name tells only where none is shown
    (a parameter), or the one shown calls a function whose result the source does not show."""
    shown = {"train_loader": "open(path)", "val_loaders": "[open(a), open(b)]",
             "test_loader": "build_loader(cfg)", "it": "iter(test_loader)",
             "loader_it": "iter(train_loader)", "dl": "DataLoader(ds, batch_size=8)",
             "cfg": "yaml.load(f)"}.get
    assert not pysource.is_dataloader_loop_line("    for line in train_loader:", shown)
    assert not pysource.is_dataloader_loop_line("    for a, b in zip(*val_loaders):", shown)
    assert pysource.dataloader_origin("enumerate(train_loader)", shown) == ("open(path)", False)
    assert pysource.dataloader_origin("zip(train_loader, dl)", shown) == (
        "zip(train_loader, dl), train_loader = open(path), dl = DataLoader(ds, batch_size=8)",
        True)
    # An iterator named for a loader, assigned the iterator of a file: no DataLoader.
    assert pysource.dataloader_origin("loader_it", shown) == (
        "iter(train_loader), train_loader = open(path)", False)
    # A factory whose result is not shown: the name is the evidence, and says so.
    assert pysource.dataloader_origin("it", shown) == (
        "iter(test_loader), test_loader = build_loader(cfg)", True)
    assert pysource.named_only("it", shown)
    assert pysource.named_only("param_loader", shown)
    assert not pysource.named_only("iter(dl)", shown)
    # No name saying so: a call whose result is not shown is none, as before.
    assert pysource.dataloader_origin("cfg", shown) == ("yaml.load(f)", False)


def test_a_parameter_hides_what_an_enclosing_scope_assigns_the_same_name() -> None:
    """A function's parameter is what its caller passes, not the module's name of the same
    spelling: ``dl = DataLoader(ds)`` at module level and ``def fit(dl): for x in dl:`` read
    the module's DataLoader into the parameter."""
    source = ["dl = DataLoader(ds)", "train_loader = open(path)", "",
              "def fit(dl, train_loader):", "    for x in dl:", "        pass",
              "    for y in train_loader:", "        pass", "",
              "def other():", "    for x in dl:", "        pass"]
    scopes = pysource.SourceScopes(source)
    assert scopes.assigned(4, 5, "dl") is None
    assert scopes.assigned(4, 7, "train_loader") is None
    assert scopes.assigned(10, 11, "dl") == "DataLoader(ds)"
    assert pysource.is_dataloader_loop_line(source[6], lambda name: scopes.assigned(4, 7, name))
    assert not pysource.is_dataloader_loop_line(source[4],
                                                lambda name: scopes.assigned(4, 5, name))
