"""Reading a Python source's syntax: loop lines, fetches, assignments, DataLoader calls."""

from __future__ import annotations

import ast

from profreport import pysource


def test_dataloader_loop_line() -> None:
    """Source lines that loop over a loader (the runner's script check uses the same rule)."""
    assert pysource.is_dataloader_loop_line("    for x, y in train_loader:", {}.get)
    assert pysource.is_dataloader_loop_line("for i, batch in enumerate(loader):", {}.get)
    assert not pysource.is_dataloader_loop_line("for epoch in range(10):", {}.get)
    # A header over range() fetches nothing, whatever it counts.
    assert not pysource.is_dataloader_loop_line("    for step in range(len(train_loader)):", {}.get)
    assert pysource.counts_passes("for i, lr in enumerate([0.1, 0.01]):  # sweep")
    assert not pysource.counts_passes("    for x, y in self.dl:")
    assert pysource.counts_passes("    while step < steps:")
    assert not pysource.counts_passes("while (batch := next(it, None)) is not None:")
    assert pysource.opens_no_loop("        time.sleep(0.001)")
    assert not pysource.opens_no_loop("    while True:")
    assert not pysource.opens_no_loop("    for i, (x, y) in enumerate(")  # continued


def test_the_iterator_a_line_fetches_from() -> None:
    """``next(it)``/``it.__next__()`` name the iterator; an assignment tells what it is."""
    assert pysource.fetched_iterator("        batch = next(it)") == "it"
    assert pysource.fetched_iterator("x, y = self.it.__next__()") == "self.it"
    assert pysource.fetched_iterator("batch = next(iter(val_loader), None)") == "iter(val_loader)"
    assert pysource.fetched_iterator("loss = model(x)") is None
    assert pysource.assigned_value("    it = iter(train_loader)", "it") == "iter(train_loader)"
    assert pysource.assigned_value("    it = iter(train_loader)", "other") is None


def test_loader_knobs_read_from_a_source_are_real_settings_only() -> None:
    """A DataLoader call's literal knobs are read; a worker count or batch size no machine runs
    (negative, or a literal thousands of digits long) is not known, not copied into a note."""
    def knobs(call: str) -> dict[str, object]:
        """The knobs of one ``DataLoader(...)`` call given as source."""
        return pysource.loader_call_knobs(ast.parse(call).body[0].value)  # type: ignore[attr-defined]

    assert knobs("DataLoader(ds, batch_size=32, num_workers=4)") == {
        "batch_size": 32, "num_workers": 4, "pin_memory": False}
    assert knobs(f"DataLoader(ds, batch_size=32, num_workers={'9' * 4000})") == {
        "batch_size": 32, "pin_memory": False}
    assert knobs("DataLoader(ds, batch_size=-1, num_workers=2)") == {
        "num_workers": 2, "pin_memory": False}


def test_a_dataloader_is_read_from_the_syntax_not_a_word() -> None:
    """A DataLoader is a ``DataLoader(...)`` call or a name that says it holds one, bare or in
    iter/enumerate/tqdm; ``loader`` anywhere else in an expression (a yaml Loader keyword, a
    config function's name) made ``cfg`` and ``x`` DataLoaders."""
    assert pysource.loader_evidence("yaml.load(f, Loader=yaml.SafeLoader)") is False
    assert pysource.loader_evidence("my_loader_config()") is False
    assert pysource.loader_evidence("range(len(train_loader))") is False
    assert pysource.loader_evidence("iter(train_loader)") is True
    assert pysource.loader_evidence("self.loader_it") is True
    assert pysource.loader_evidence("torch.utils.data.DataLoader(ds, batch_size=8)") is True
    assert pysource.loader_evidence("tqdm(enumerate(DataLoader(ds)))") is True
    assert pysource.loader_evidence("iter(dl)") is None  # what dl holds, another line shows
    assert not pysource.is_dataloader_loop_line(
        "    for key in yaml.load(f, Loader=yaml.SafeLoader):", {}.get)
    assert pysource.is_dataloader_loop_line("    for b in tqdm(train_loader):", {}.get)
    assert pysource.is_dataloader_loop_line("    for i, b in tqdm(enumerate(dl)):",
                                            {"dl": "DataLoader(ds)"}.get)


def test_a_name_holds_a_dataloader_when_its_last_word_names_one() -> None:
    """Where no assignment is shown, a name holds a DataLoader when its last word ends in
    ``loader`` (or an iterator word follows that word). ``loader`` anywhere in the
    name made a loader's configuration one: ``for key in self.loader_cfg:`` read as a loop over
    a DataLoader, and ``next(iter(loader_config))`` as a fetch of a batch."""
    for name in ("train_loader", "trainloader", "self.valLoader", "TRAIN_LOADER",
                 "self.loader_it", "data_loader_iterator", "test_loader2", "dataloader"):
        assert pysource.loader_evidence(name) is True, name
    for name in ("self.loader_cfg", "loader_config", "num_loader_workers", "loader_kwargs",
                 "val_loaders", "train_dl", "it", "loaderish"):
        assert pysource.loader_evidence(name) is None, name  # what it holds, another line shows
    assert not pysource.is_dataloader_loop_line("    for key in self.loader_cfg:", {}.get)
    assert pysource.dataloader_origin("iter(loader_config)", {}.get) == (None, None)
    # The syntax first: an assignment the source shows tells what the name holds.
    assert pysource.is_dataloader_loop_line("    for x, y in loader_cfg:",
                                            {"loader_cfg": "DataLoader(ds)"}.get)
    assert pysource.dataloader_origin("loader_config", {"loader_config": "dict(workers=2)"}.get
                                      ) == ("dict(workers=2)", False)


def test_a_word_ending_in_loader_that_moves_files_or_code_names_no_dataloader() -> None:
    """A last word ending in ``loader`` named a DataLoader whatever came before it, so
    ``for chunk in self.downloader:`` (a dataset's downloader) read as a loop over one and
    ``next(uploader)`` as a fetch of a batch. Real names join any word to ``loader``
    (``valloader``, torchreid's ``queryloader``), and those stay loaders, ``preloader`` too."""
    for name in ("self.downloader", "imageDownloader", "uploader", "reloader", "unloader",
                 "bootloader", "classloader_it"):
        assert pysource.loader_evidence(name) is None, name  # what it holds, another line shows
    assert pysource.loader_evidence("zip(*downloaders)") is None
    for name in ("queryloader", "galleryloader", "valloader", "self.preloader", "dloader",
                 "image_loader", "trainLoader"):
        assert pysource.loader_evidence(name) is True, name
    assert not pysource.is_dataloader_loop_line("    for chunk in self.downloader:", {}.get)
    assert pysource.is_dataloader_loop_line("    for x, y in downloader:",
                                            {"downloader": "DataLoader(ds)"}.get)


def test_loader_knobs_are_read_as_dataloader_reads_its_arguments() -> None:
    """torch.utils.data.DataLoader (torch 2.13) sets batch_size None beside a batch_sampler,
    keyword or its 5th positional argument, and for ``batch_size=None``; it raises for a
    batch_size other than 1 beside a batch_sampler, and its BatchSampler for a batch size of
    0. A positional batch_sampler read as batch_size 1 (PyTorch's default), ``batch_size=0``
    as 0, ``batch_sampler=None`` (no sampler) left the batch size unknown."""
    def knobs(call: str) -> dict[str, object]:
        """The knobs of one ``DataLoader(...)`` call given as source."""
        return pysource.loader_call_knobs(ast.parse(call).body[0].value)  # type: ignore[attr-defined]

    assert knobs("DataLoader(ds, 1, False, None, bs, 4)") == {
        "batch_size": None, "num_workers": 4, "pin_memory": False}
    assert knobs("DataLoader(ds, batch_sampler=bs, pin_memory=True)") == {
        "batch_size": None, "num_workers": 0, "pin_memory": True}
    assert knobs("DataLoader(ds, batch_size=None)")["batch_size"] is None
    assert "batch_size" not in knobs("DataLoader(ds, batch_size=0)")
    assert "batch_size" not in knobs("DataLoader(ds, batch_size=32, batch_sampler=bs)")
    assert "batch_size" not in knobs("DataLoader(ds, batch_size=args.bs, batch_sampler=bs)")
    assert "num_workers" not in knobs("DataLoader(ds, num_workers=None)")
    assert knobs("DataLoader(ds, batch_size=8, batch_sampler=None)")["batch_size"] == 8
    assert "batch_size" not in knobs("DataLoader(ds, **options)")


def test_a_loop_header_over_several_lines_is_written_back_on_one() -> None:
    """The header of a ``for`` or ``while`` written over several lines is kept by its first
    line as one line (its first line alone is no statement); a header on one line is not."""
    source = ("def fit(model, train_loader):\n"
              "    for i, (x, y) in enumerate(train_loader,\n"
              "                               start=1):  # numbered from 1\n"
              "        step(model, x, y)\n"
              "    while (model.training and\n"
              "           not done()):\n"
              "        pass\n"
              "    for key in log: pass\n")
    headers = pysource.SourceScopes(source.splitlines()).loop_headers
    assert headers == {2: "for (i, (x, y)) in enumerate(train_loader, start=1):",
                       5: "while model.training and (not done()):"}
    assert pysource.is_dataloader_loop_line(headers[2], lambda name: None)
    assert pysource.is_loop_line(headers[5])


def test_a_loop_over_dataloaders_zipped_together_is_a_dataloader_loop() -> None:
    """``zip`` takes an item of every argument each pass: a loop over a source and a target
    DataLoader stepped together (domain adaptation) fetches batches, as the word test before
    5301a87 took it; since, a call other than iter/enumerate/tqdm read as no DataLoader. A zip
    of names that may hold one is unknown (``zip(*pairs)`` too), of what the source shows to be
    something else is none."""
    def assigned(name: str) -> None:
        """Nothing assigned: the line alone tells."""
    assert pysource.is_dataloader_loop_line(
        "for (xs, ys), (xt, _) in zip(source_loader, target_loader):", assigned)
    assert pysource.is_dataloader_loop_line(
        "for i, (a, b) in enumerate(zip(train_loader, cycle(aux))):", assigned)
    assert pysource.loader_evidence("iter(zip(*val_loaders))") is True
    assert pysource.loader_evidence("zip(images, labels)") is None
    assert pysource.loader_evidence("zip(*pairs)") is None
    assert pysource.loader_evidence("zip([0.1, 0.01], range(2))") is False


def test_a_zip_of_names_assigned_dataloaders_is_followed_argument_by_argument() -> None:
    """``src = DataLoader(a)``, ``tgt = DataLoader(b)``, then ``for (xs, ys), (xt, _) in
    zip(src, tgt):``: each pass fetches from both loaders. Assignments were followed for one
    name only, so a zip of names stayed unknown however the function assigned them."""
    shown = {"src": "DataLoader(a, batch_size=32)", "tgt": "DataLoader(b, batch_size=32)",
             "labels": "torch.arange(10)", "it": "zip(src, labels)"}.get
    assert pysource.is_dataloader_loop_line("    for (xs, ys), (xt, _) in zip(src, tgt):", shown)
    assert pysource.dataloader_origin("enumerate(zip(src, tgt))", shown) == (
        "enumerate(zip(src, tgt)), src = DataLoader(a, batch_size=32), "
        "tgt = DataLoader(b, batch_size=32)", True)
    # One argument a DataLoader: each pass fetches from it.
    assert pysource.dataloader_origin("zip(src, labels)", shown)[1] is True
    # An iterator assigned a zip: its arguments are followed too.
    assert pysource.dataloader_origin("it", shown) == (
        "zip(src, labels), src = DataLoader(a, batch_size=32), labels = torch.arange(10)", True)
    # Every argument shown to be something else: no DataLoader; one not shown: unknown.
    assert pysource.dataloader_origin("zip(labels, labels)", shown) == (
        "zip(labels, labels), labels = torch.arange(10), labels = torch.arange(10)", False)
    assert pysource.dataloader_origin("zip(labels, pairs)", shown) == (
        "zip(labels, pairs), labels = torch.arange(10)", None)
    assert pysource.dataloader_origin("zip(xs, ys)", shown) == (None, None)
    # A name assigned a zip of itself is followed once, not for ever.
    assert pysource.dataloader_origin("a", {"a": "zip(a, b)"}.get) == (
        "zip(a, b), a = zip(a, b)", None)


def test_a_starred_zip_argument_is_followed_to_the_literal_it_was_assigned() -> None:
    """``dls = [DataLoader(a), DataLoader(b)]`` then ``for xa, xb in zip(*dls):``: each pass
    fetches from both loaders. A starred argument was judged by its name alone (``val_loaders``
    says it, ``dls`` does not), so the loop read as unknown whatever the list held. The items of
    the list or tuple literal the name was assigned are followed now, as zip's own arguments
    are; what the source does not show item by item stays unknown."""
    shown = {"dls": "[DataLoader(a, batch_size=8), DataLoader(b, batch_size=8)]",
             "src": "DataLoader(a)", "mixed": "(src, torch.arange(3))",
             "pairs": "(torch.arange(3), torch.arange(3))",
             "made": "[DataLoader(d) for d in sets]", "more": "[*dls, DataLoader(c)]"}.get
    assert pysource.is_dataloader_loop_line("    for xa, xb in zip(*dls):", shown)
    assert pysource.dataloader_origin("enumerate(zip(*dls))", shown) == (
        "enumerate(zip(*dls)), dls = [DataLoader(a, batch_size=8), DataLoader(b, "
        "batch_size=8)]", True)
    # Items that are names are followed too; items all shown to be something else: none.
    assert pysource.dataloader_origin("zip(*mixed)", shown) == (
        "zip(*mixed), mixed = (src, torch.arange(3)), src = DataLoader(a)", True)
    assert pysource.dataloader_origin("zip(*pairs)", shown) == (
        "zip(*pairs), pairs = (torch.arange(3), torch.arange(3))", False)
    # A comprehension of DataLoaders: each of its items is one.
    assert pysource.dataloader_origin("zip(*made)", shown) == (
        "zip(*made), made = [DataLoader(d) for d in sets]", True)
    # A literal spreading another list, or not assigned: unknown.
    for expression in ("zip(*more)", "zip(*batches)"):
        assert pysource.dataloader_origin(expression, shown) == (None, None)
