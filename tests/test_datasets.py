"""Datasets: CIFAR-10 and text loaders on real-format files, batching, shapes, augmentation."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from esper.tolaria import DATA_DIR_ENV, DatasetError, get_task
from esper.tolaria.datasets import (
    CIFAR10_TEST_FILE,
    CIFAR10_TRAIN_FILES,
    SHAPE_CLASSES,
    ImageData,
    TokenData,
    load_cifar10,
    load_text_corpus,
    procedural_shapes,
    pydoc_topics_bytes,
    random_crop_flip,
    split_tokens,
)

# --------------------------------------------------------------------------- CIFAR-10 fixtures
IMAGES_PER_TRAIN_FILE = 4
SELECTION_IMAGES = 2  # the last tenth of the 20 training images
IMAGES_IN_TEST_FILE = 4


def cifar_pixels(n: int, offset: int) -> np.ndarray:
    """`n` images as the real files hold them: uint8 rows of 3072 = R plane, G plane, B plane,
    each 32x32 row-major. Every channel has its own spatial pattern so a channel or axis mix-up
    cannot be an affine map of the original."""
    yy, xx = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    rows = []
    for k in range(n):
        i = offset + k
        red = (7 * yy + 3 * i) % 256  # varies down the rows
        green = (5 * xx + 11 * i) % 256  # varies across the columns
        blue = ((xx + yy) % 2) * 200 + (i % 50)  # checkerboard
        rows.append(np.stack([red, green, blue]).astype(np.uint8).reshape(3072))
    return np.stack(rows)


def cifar_labels(n: int, offset: int) -> list[int]:
    return [(offset + 3 * k) % 10 for k in range(n)]


def write_cifar_batch(path: Path, data: np.ndarray, labels: list[int]) -> None:
    entry = {
        b"batch_label": path.name.encode(),
        b"labels": labels,
        b"data": data,
        b"filenames": [f"img_{k}.png".encode() for k in range(len(labels))],
    }
    with path.open("wb") as f:
        pickle.dump(entry, f, protocol=2)  # the real files are protocol-2 pickles with bytes keys


def make_cifar_folder(parent: Path) -> Path:
    root = parent / "cifar-10-batches-py"
    root.mkdir(parents=True)
    for i, name in enumerate(CIFAR10_TRAIN_FILES):
        offset = 100 * (i + 1)
        write_cifar_batch(
            root / name,
            cifar_pixels(IMAGES_PER_TRAIN_FILE, offset),
            cifar_labels(IMAGES_PER_TRAIN_FILE, offset),
        )
    write_cifar_batch(
        root / CIFAR10_TEST_FILE,
        cifar_pixels(IMAGES_IN_TEST_FILE, 7),
        cifar_labels(IMAGES_IN_TEST_FILE, 7),
    )
    return root


def expected_raw() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the folder written by `make_cifar_folder` holds, as (N, 3, 32, 32) and labels: every
    training image, then the test file's."""
    tx = np.concatenate([cifar_pixels(IMAGES_PER_TRAIN_FILE, 100 * (i + 1)) for i in range(5)])
    ty = [label for i in range(5) for label in cifar_labels(IMAGES_PER_TRAIN_FILE, 100 * (i + 1))]
    vx = cifar_pixels(IMAGES_IN_TEST_FILE, 7)
    vy = cifar_labels(IMAGES_IN_TEST_FILE, 7)

    def to_img(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a.reshape(-1, 3, 32, 32).astype(np.float64))

    return to_img(tx), torch.tensor(ty), to_img(vx), torch.tensor(vy)


@pytest.fixture
def cifar_root(tmp_path: Path) -> Path:
    return make_cifar_folder(tmp_path)


# --------------------------------------------------------------------------- CIFAR-10 loading
@pytest.mark.parametrize("which", ["folder", "parent"])
def test_cifar10_loads_folder_or_parent(cifar_root: Path, which: str) -> None:
    data = load_cifar10(cifar_root if which == "folder" else cifar_root.parent)
    assert isinstance(data, ImageData)
    n_train = 5 * IMAGES_PER_TRAIN_FILE - SELECTION_IMAGES
    assert data.split_sizes() == {"train": n_train, "val": SELECTION_IMAGES, "test": IMAGES_IN_TEST_FILE}
    assert data.train_x.shape == (n_train, 3, 32, 32)
    assert data.val_x.shape == (SELECTION_IMAGES, 3, 32, 32)
    assert data.test_x.shape == (IMAGES_IN_TEST_FILE, 3, 32, 32)
    for x in (data.train_x, data.val_x, data.test_x):
        assert x.dtype == torch.float32
    for y in (data.train_y, data.val_y, data.test_y):
        assert y.dtype == torch.int64
    _, ty, _, sy = expected_raw()
    # data_batch_1..5 in order, labels in file order: the selection split is the last tenth of
    # the training batches, and test_batch is the test split
    assert data.train_y.tolist() == ty[:n_train].tolist()
    assert data.val_y.tolist() == ty[n_train:].tolist()
    assert data.test_y.tolist() == sy.tolist()
    assert data.num_classes == 10
    assert data.augment is True


def test_cifar10_pixels_are_a_per_channel_affine_map_of_the_file(cifar_root: Path) -> None:
    data = load_cifar10(cifar_root)
    raw_train, _, raw_test, _ = expected_raw()
    raw = torch.cat([raw_train, raw_test])
    got = torch.cat([data.train_x, data.val_x, data.test_x]).double()
    for c in range(3):
        r, z = raw[:, c].flatten(), got[:, c].flatten()
        # least-squares fit z = a*r + b over all three splits together: train statistics
        # must normalise every split, and every pixel must sit exactly on the line
        design = torch.stack([r, torch.ones_like(r)], dim=1)
        a, b = torch.linalg.lstsq(design, z[:, None]).solution.flatten()
        assert a > 0, f"channel {c} is not an increasing map of the stored channel"
        torch.testing.assert_close(a * r + b, z, atol=1e-4, rtol=0)
    # the training images are standardised per channel
    train = data.train_x.double()
    torch.testing.assert_close(train.mean(dim=(0, 2, 3)), torch.zeros(3, dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(train.std(dim=(0, 2, 3)), torch.ones(3, dtype=torch.float64), atol=1e-4, rtol=0)


def test_cifar10_missing_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetError, match="nowhere"):
        load_cifar10(missing)


def test_cifar10_folder_without_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError) as info:
        load_cifar10(empty)
    assert str(empty) in str(info.value)
    assert "cifar-10-batches-py" in str(info.value)


def test_cifar10_one_training_batch_missing(cifar_root: Path) -> None:
    (cifar_root / "data_batch_3").unlink()
    with pytest.raises(DatasetError) as info:
        load_cifar10(cifar_root.parent)
    assert str(cifar_root / "data_batch_3") in str(info.value)
    assert "missing" in str(info.value)


def test_cifar10_test_batch_missing(cifar_root: Path) -> None:
    (cifar_root / CIFAR10_TEST_FILE).unlink()
    with pytest.raises(DatasetError, match="cifar-10-batches-py"):
        load_cifar10(cifar_root)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a pickle at all\n" * 20)


def _not_a_dict(path: Path) -> None:
    path.write_bytes(pickle.dumps([1, 2, 3]))


def _no_labels(path: Path) -> None:
    path.write_bytes(pickle.dumps({b"data": cifar_pixels(2, 0)}))


def _label_ten(path: Path) -> None:
    write_cifar_batch(path, cifar_pixels(3, 0), [0, 10, 2])


def _label_negative(path: Path) -> None:
    write_cifar_batch(path, cifar_pixels(3, 0), [0, -1, 2])


def _count_mismatch(path: Path) -> None:
    write_cifar_batch(path, cifar_pixels(3, 0), [0, 1])


def _no_images(path: Path) -> None:
    write_cifar_batch(path, np.zeros((0, 3072), dtype=np.uint8), [])


def _wrong_row_length(path: Path) -> None:
    write_cifar_batch(path, np.zeros((3, 1000), dtype=np.uint8), [0, 1, 2])


def _images_last_layout(path: Path) -> None:
    """A converted (n, 32, 32, 3) array: the right size, the wrong layout."""
    write_cifar_batch(path, np.zeros((3, 32, 32, 3), dtype=np.uint8), [0, 1, 2])


@pytest.mark.parametrize(
    "corrupt",
    [
        _truncate,
        _garbage,
        _not_a_dict,
        _no_labels,
        _label_ten,
        _label_negative,
        _count_mismatch,
        _no_images,
        _wrong_row_length,
        _images_last_layout,
    ],
)
@pytest.mark.parametrize("name", ["data_batch_2", CIFAR10_TEST_FILE])
def test_cifar10_corrupt_file(cifar_root: Path, corrupt, name: str) -> None:
    corrupt(cifar_root / name)
    with pytest.raises(DatasetError) as info:
        load_cifar10(cifar_root)
    assert str(cifar_root / name) in str(info.value)
    assert "corrupt" in str(info.value)


# --------------------------------------------------------------------------- text corpus
STORY = "Once upon a time there was a little fox who liked to read. The end.\n"


def tinystories_text(n_stories: int) -> str:
    return "<|endoftext|>\n".join(f"Story {i}. {STORY}" for i in range(n_stories))


def as_bytes(t: torch.Tensor) -> bytes:
    return bytes(t.to(torch.uint8).tolist())


def test_text_folder_with_train_and_valid_files(tmp_path: Path) -> None:
    train_text, valid_text = tinystories_text(30), tinystories_text(8).replace("fox", "owl")
    (tmp_path / "TinyStoriesV2-GPT4-train.txt").write_text(train_text, encoding="utf-8")
    (tmp_path / "TinyStoriesV2-GPT4-valid.txt").write_text(valid_text, encoding="utf-8")
    (tmp_path / "README.md").write_text("not part of the corpus")
    train, val, test = load_text_corpus(tmp_path, block_size=16, val_fraction=0.25, test_fraction=0.5)
    assert train.dtype == val.dtype == test.dtype == torch.int64
    # the official validation text is the test split; the selection split is the last quarter of
    # the training text (test_fraction is ignored when both files exist)
    cut = int(len(train_text.encode()) * 0.75)
    assert as_bytes(train) == train_text.encode()[:cut]
    assert as_bytes(val) == train_text.encode()[cut:]
    assert as_bytes(test) == valid_text.encode()


def test_text_folder_reads_utf8_bytes(tmp_path: Path) -> None:
    text = "Café naïve — 小狐狸 " * 20
    (tmp_path / "a-train.txt").write_text(text, encoding="utf-8")
    (tmp_path / "a-valid.txt").write_text(text, encoding="utf-8")
    train, val, test = load_text_corpus(tmp_path, block_size=8, val_fraction=0.1, test_fraction=0.1)
    assert as_bytes(train) + as_bytes(val) == as_bytes(test) == text.encode("utf-8")
    assert int(train.max()) > 127  # bytes, not characters


def test_text_single_file_split_three_ways(tmp_path: Path) -> None:
    text = tinystories_text(20).encode()
    path = tmp_path / "corpus.txt"
    path.write_bytes(text)
    train, val, test = load_text_corpus(path, block_size=16, val_fraction=0.25, test_fraction=0.15)
    val_start, test_start = int(len(text) * 0.6), int(len(text) * 0.85)
    assert as_bytes(train) == text[:val_start]
    assert as_bytes(val) == text[val_start:test_start]
    assert as_bytes(test) == text[test_start:]


def test_text_folder_with_exactly_one_txt(tmp_path: Path) -> None:
    text = tinystories_text(20).encode()
    (tmp_path / "stories.txt").write_bytes(text)
    (tmp_path / "notes.md").write_text("ignored")
    train, val, test = load_text_corpus(tmp_path, block_size=16, val_fraction=0.1, test_fraction=0.1)
    assert as_bytes(train) + as_bytes(val) + as_bytes(test) == text
    assert test.numel() == len(text) - int(len(text) * 0.9)


def test_text_missing_path(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no_such_corpus"):
        load_text_corpus(tmp_path / "no_such_corpus", block_size=16, val_fraction=0.1, test_fraction=0.1)


def test_text_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "x-train.txt").write_text(tinystories_text(10))
    bad = tmp_path / "x-valid.txt"
    bad.write_bytes(tinystories_text(10).encode() + b"\xff\xfe broken")
    with pytest.raises(DatasetError) as info:
        load_text_corpus(tmp_path, block_size=16, val_fraction=0.1, test_fraction=0.1)
    assert str(bad) in str(info.value)
    assert "UTF-8" in str(info.value)


def test_text_nul_bytes(tmp_path: Path) -> None:
    path = tmp_path / "binary.txt"
    path.write_bytes(tinystories_text(10).encode() + b"\x00\x00\x00")
    with pytest.raises(DatasetError) as info:
        load_text_corpus(path, block_size=16, val_fraction=0.1, test_fraction=0.1)
    assert str(path) in str(info.value)
    assert "NUL" in str(info.value)


@pytest.mark.parametrize("layout", ["file", "folder of one", "train and valid"])
def test_an_empty_text_file_is_a_dataset_error(tmp_path: Path, layout: str) -> None:
    """torch.frombuffer refused the empty buffer in a traceback."""
    empty = tmp_path / ("x-valid.txt" if layout == "train and valid" else "empty.txt")
    empty.write_text("")
    if layout == "train and valid":
        (tmp_path / "x-train.txt").write_text(tinystories_text(20))
    given = empty if layout == "file" else tmp_path
    with pytest.raises(DatasetError, match="is empty") as info:
        load_text_corpus(given, block_size=16, val_fraction=0.1, test_fraction=0.1)
    assert str(empty) in str(info.value)


@pytest.mark.parametrize("short", ["train", "valid"])
def test_text_too_short(tmp_path: Path, short: str) -> None:
    block = 32
    long_text, short_text = tinystories_text(20), "x" * (2 * (block + 1) - 1)
    (tmp_path / "s-train.txt").write_text(short_text if short == "train" else long_text)
    (tmp_path / "s-valid.txt").write_text(short_text if short == "valid" else long_text)
    with pytest.raises(DatasetError, match="too short") as info:
        load_text_corpus(tmp_path, block_size=block, val_fraction=0.1, test_fraction=0.1)
    assert str(tmp_path) in str(info.value)


def test_text_exactly_long_enough(tmp_path: Path) -> None:
    block = 32
    (tmp_path / "s-train.txt").write_text("y" * (20 * (block + 1)))
    (tmp_path / "s-valid.txt").write_text("z" * (2 * (block + 1)))
    _, val, test = load_text_corpus(tmp_path, block_size=block, val_fraction=0.1, test_fraction=0.1)
    assert val.numel() == test.numel() == 2 * (block + 1)  # the selection split: a tenth of the training text


def test_text_single_file_too_short_after_split(tmp_path: Path) -> None:
    path = tmp_path / "small.txt"
    path.write_text("a" * 200)  # 160 training bytes, but only 20 for selection and 20 for test
    with pytest.raises(DatasetError, match="selection"):
        load_text_corpus(path, block_size=16, val_fraction=0.1, test_fraction=0.1)


def test_text_folder_with_several_txt_but_no_pair(tmp_path: Path) -> None:
    for name in ("one.txt", "two.txt", "only-train.txt"):
        (tmp_path / name).write_text(tinystories_text(10))
    with pytest.raises(DatasetError) as info:
        load_text_corpus(tmp_path, block_size=16, val_fraction=0.1, test_fraction=0.1)
    message = str(info.value)
    assert str(tmp_path) in message and "3 .txt" in message


def test_text_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"found 0 \.txt"):
        load_text_corpus(tmp_path, block_size=16, val_fraction=0.1, test_fraction=0.1)


# --------------------------------------------------------------------------- TokenData
def counting_token_data(
    n_train: int = 500, n_val: int = 300, block: int = 8, windows: int = 40, max_val: int = 1000
) -> TokenData:
    """Tokens equal to their position (the test split offset by 10,000), so a window's start,
    contiguity and split are visible."""
    return TokenData(
        torch.arange(n_train),
        torch.arange(n_val),
        torch.arange(n_val) + 10_000,
        block_size=block,
        train_windows_per_epoch=windows,
        max_eval_windows=max_val,
    )


def test_token_splits_report_the_tokens_scored() -> None:
    data = counting_token_data(n_train=500, n_val=300, block=8, max_val=5)
    assert data.split_sizes() == {"train": 500, "val": 5 * 8, "test": 5 * 8}
    uncapped = counting_token_data(n_train=500, n_val=300, block=8)
    assert uncapped.split_sizes() == {"train": 500, "val": (299 // 8) * 8, "test": (299 // 8) * 8}


@pytest.mark.parametrize(("val", "test"), [(-0.1, 0.1), (0.1, 1.0), (0.6, 0.4), (0.5, 0.7)])
def test_split_fractions_must_leave_training_text(val: float, test: float) -> None:
    with pytest.raises(ValueError, match="fraction"):
        split_tokens(b"x" * 1000, val, test)


def test_token_train_batches_are_shifted_windows_of_the_corpus() -> None:
    data = counting_token_data(n_train=500, block=8, windows=40)
    batches = list(data.train_batches(16, torch.Generator().manual_seed(0)))
    assert len(batches) == 40 // 16  # the ragged last batch is dropped
    for x, y in batches:
        assert x.shape == y.shape == (16, 8)
        assert x.dtype == torch.int64 and y.dtype == torch.int64
        starts = x[:, 0]
        assert torch.equal(x, starts[:, None] + torch.arange(8))  # a contiguous window of the corpus
        assert torch.equal(y, x + 1)  # next-token targets
        assert int(starts.min()) >= 0 and int(y.max()) <= 499  # inside the corpus


def test_token_train_batches_deterministic_given_generator() -> None:
    data = counting_token_data()
    a = list(data.train_batches(8, torch.Generator().manual_seed(5)))
    b = list(data.train_batches(8, torch.Generator().manual_seed(5)))
    c = list(data.train_batches(8, torch.Generator().manual_seed(6)))
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b, strict=True))
    assert not all(torch.equal(xa, xc) for (xa, _), (xc, _) in zip(a, c, strict=True))


def test_token_train_batches_on_real_bytes(tmp_path: Path) -> None:
    text = tinystories_text(40).encode()
    (tmp_path / "corpus.txt").write_bytes(text)
    train, val, test = load_text_corpus(tmp_path / "corpus.txt", block_size=16, val_fraction=0.1, test_fraction=0.1)
    data = TokenData(train, val, test, block_size=16, train_windows_per_epoch=12, max_eval_windows=50)
    train_bytes = as_bytes(train)
    for x, y in data.train_batches(4, torch.Generator().manual_seed(1)):
        for row_x, row_y in zip(x, y, strict=True):
            window = as_bytes(torch.cat([row_x, row_y[-1:]]))
            assert window in train_bytes
            assert torch.equal(row_x[1:], row_y[:-1])


def test_token_val_batches_consecutive_and_deterministic() -> None:
    data = counting_token_data(n_val=300, block=8)
    batches = list(data.val_batches(10))
    xs = torch.cat([x for x, _ in batches])
    ys = torch.cat([y for _, y in batches])
    n = (300 - 1) // 8
    assert xs.shape == ys.shape == (n, 8)
    assert [x.shape[0] for x, _ in batches] == [10, 10, 10, n - 30]
    assert torch.equal(xs.flatten(), torch.arange(n * 8))  # non-overlapping, from the start, in order
    assert torch.equal(ys, xs + 1)
    again = list(data.val_batches(10))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, again, strict=True))


def test_token_eval_batches_capped_by_max_eval_windows() -> None:
    data = counting_token_data(n_val=300, block=8, max_val=5)
    xs = torch.cat([x for x, _ in data.val_batches(4)])
    assert torch.equal(xs.flatten(), torch.arange(40))
    test = torch.cat([x for x, _ in data.test_batches(4)])
    assert torch.equal(test.flatten(), torch.arange(40) + 10_000)
    calibration = torch.cat([x for x, _ in data.calibration_batches(4)])
    assert torch.equal(calibration.flatten(), torch.arange(40))  # the start of the training split


# --------------------------------------------------------------------------- procedural shapes
def test_shapes_deterministic_from_seed() -> None:
    x1, y1 = procedural_shapes(30, seed=3)
    x2, y2 = procedural_shapes(30, seed=3)
    x3, y3 = procedural_shapes(30, seed=4)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, x3)
    assert not torch.equal(y1, y3)


@pytest.mark.parametrize("size", [16, 12])
def test_shapes_every_class_and_shape(size: int) -> None:
    x, y = procedural_shapes(40, seed=0, image_size=size)
    assert x.shape == (40, 3, size, size) and x.dtype == torch.float32
    assert y.shape == (40,) and y.dtype == torch.int64
    assert torch.bincount(y, minlength=len(SHAPE_CLASSES)).tolist() == [4] * len(SHAPE_CLASSES)
    assert torch.isfinite(x).all()
    assert x.std() > 0.05  # images, not constants


# --------------------------------------------------------------------------- ImageData batching
def indexed_images(n: int, augment: bool = False, samples_per_epoch: int | None = None) -> ImageData:
    """Image i is filled with the value i and labelled i, so a batch says which images it holds."""
    x = torch.arange(n, dtype=torch.float32)[:, None, None, None].expand(n, 3, 8, 8).clone()
    y = torch.arange(n)
    return ImageData(
        x,
        y,
        x[:4].clone(),
        y[:4].clone(),
        x[4:8].clone(),
        y[4:8].clone(),
        num_classes=n,
        augment=augment,
        samples_per_epoch=samples_per_epoch,
    )


def test_image_train_batches_samples_per_epoch() -> None:
    data = indexed_images(100, samples_per_epoch=25)
    g = torch.Generator().manual_seed(0)
    first = list(data.train_batches(10, g))
    assert [x.shape for x, _ in first] == [(10, 3, 8, 8)] * 2  # 25 drawn, ragged 5 dropped
    labels = torch.cat([y for _, y in first])
    assert labels.unique().numel() == 20  # drawn without replacement
    for x, y in first:
        assert torch.equal(x[:, 0, 0, 0].long(), y)  # images travel with their labels
    second = torch.cat([y for _, y in data.train_batches(10, g)])
    assert not torch.equal(labels, second)  # a new draw each epoch


def test_image_train_batches_exact_samples_per_epoch() -> None:
    data = indexed_images(100, samples_per_epoch=30)
    labels = torch.cat([y for _, y in data.train_batches(5, torch.Generator().manual_seed(2))])
    assert labels.numel() == 30 and labels.unique().numel() == 30


def test_image_train_batches_full_pass_when_none() -> None:
    data = indexed_images(50)
    batches = list(data.train_batches(8, torch.Generator().manual_seed(0)))
    assert len(batches) == 6
    labels = torch.cat([y for _, y in batches])
    assert labels.unique().numel() == 48
    assert not torch.equal(labels, torch.arange(48))  # shuffled


def test_image_train_batches_deterministic_given_generator() -> None:
    data = indexed_images(60, augment=True, samples_per_epoch=40)
    run = lambda seed: list(data.train_batches(8, torch.Generator().manual_seed(seed)))  # noqa: E731
    a, b, c = run(7), run(7), run(8)
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b, strict=True))
    assert not all(torch.equal(ya, yc) for (_, ya), (_, yc) in zip(a, c, strict=True))


@pytest.mark.parametrize("split", ["val", "test"])
def test_image_eval_batches_cover_their_split_in_order(split: str) -> None:
    x, y = procedural_shapes(23, seed=1)
    other_x, other_y = procedural_shapes(7, seed=2)
    splits = (x, y, other_x, other_y) if split == "val" else (other_x, other_y, x, y)
    data = ImageData(other_x, other_y, *splits, num_classes=10, augment=False)
    batches = list(getattr(data, f"{split}_batches")(10))
    assert [b[0].shape[0] for b in batches] == [10, 10, 3]
    assert torch.equal(torch.cat([b[0] for b in batches]), x)
    assert torch.equal(torch.cat([b[1] for b in batches]), y)


def test_image_calibration_batches_are_the_first_training_images_unaugmented() -> None:
    data = dataclasses.replace(indexed_images(50, augment=True), calibration_size=23)
    batches = list(data.calibration_batches(10))
    assert [x.shape[0] for x, _ in batches] == [10, 10, 3]
    assert torch.equal(torch.cat([x for x, _ in batches]), data.train_x[:23])  # not cropped or flipped
    assert torch.equal(torch.cat([y for _, y in batches]), torch.arange(23))


def test_shapes_task_has_three_disjoint_splits() -> None:
    data = get_task("shapes").load_data(None)
    assert data.split_sizes() == {"train": 50_000, "val": 2000, "test": 10_000}
    # drawn from different generator streams: no test image is a copy of a selection image
    assert not torch.equal(data.val_x[:100], data.test_x[:100])
    assert torch.cdist(data.test_x[:200].flatten(1), data.val_x.flatten(1)).min() > 1.0


# --------------------------------------------------------------------------- augmentation
def crops_of(image: torch.Tensor, pad: int) -> list[torch.Tensor]:
    _, h, w = image.shape
    padded = torch.nn.functional.pad(image, (pad, pad, pad, pad))
    return [padded[:, dy : dy + h, dx : dx + w] for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)]


def test_random_crop_flip_outputs_are_crops_or_flipped_crops() -> None:
    x = torch.randn(24, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    out = random_crop_flip(x, pad=2, generator=torch.Generator().manual_seed(1))
    assert out.shape == x.shape and out.dtype == x.dtype
    flips, offsets = [], set()
    for image, result in zip(x, out, strict=True):
        crops = crops_of(image, 2)
        plain = [k for k, c in enumerate(crops) if torch.equal(result, c)]
        flipped = [k for k, c in enumerate(crops) if torch.equal(result, c.flip(-1))]
        assert plain or flipped, "output is neither a crop nor a flipped crop of the padded input"
        flips.append(bool(flipped))
        offsets.update(plain or flipped)
    assert any(flips) and not all(flips)  # both branches are taken
    assert len(offsets) > 3  # crops vary in position


def test_random_crop_flip_pad_zero_is_identity_or_mirror() -> None:
    x = torch.randn(32, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    out = random_crop_flip(x, pad=0, generator=torch.Generator().manual_seed(4))
    same = [torch.equal(o, i) for o, i in zip(out, x, strict=True)]
    mirrored = [torch.equal(o, i.flip(-1)) for o, i in zip(out, x, strict=True)]
    assert all(s or m for s, m in zip(same, mirrored, strict=True))
    assert any(same) and any(mirrored)


def test_random_crop_flip_deterministic_given_generator() -> None:
    x = torch.randn(10, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    a = random_crop_flip(x, pad=2, generator=torch.Generator().manual_seed(9))
    b = random_crop_flip(x, pad=2, generator=torch.Generator().manual_seed(9))
    assert torch.equal(a, b)
    assert not torch.equal(a, x)


# ------------------------------------------------------------------------- embedded text, data dirs
def test_pydoc_topics_bytes_is_english_text() -> None:
    data = pydoc_topics_bytes()
    assert len(data) > 100_000
    text = data.decode("utf-8")
    assert b"\x00" not in data
    words = text.lower().split()
    for common in ("the", "and", "function", "statement"):
        assert common in words
    letters = sum(ch.isascii() and (ch.isalpha() or ch.isspace()) for ch in text)
    assert letters / len(text) > 0.8
    assert pydoc_topics_bytes() == data  # stable order


def test_embedded_task_rejects_data_dir() -> None:
    task = get_task("shapes")
    assert task.resolve_data_dir(None) is None
    with pytest.raises(DatasetError, match="shapes") as info:
        task.resolve_data_dir("/some/folder")
    assert "/some/folder" in str(info.value)


def test_real_task_without_flag_or_env_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with pytest.raises(DatasetError) as info:
        get_task("cifar10").resolve_data_dir(None)
    assert "--data-dir" in str(info.value) and DATA_DIR_ENV in str(info.value)


def test_real_task_with_empty_env_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, "")
    with pytest.raises(DatasetError):
        get_task("textfile").resolve_data_dir(None)


def test_real_task_uses_env_then_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "from_env"))
    task = get_task("cifar10")
    assert task.resolve_data_dir(None) == tmp_path / "from_env"
    assert task.resolve_data_dir(str(tmp_path / "from_flag")) == tmp_path / "from_flag"


def _deny(monkeypatch: pytest.MonkeyPatch, method: str, target: Path) -> None:
    """Make `Path.<method>` fail with EACCES on `target`, as for a mode-000 folder (root ignores modes)."""
    real = getattr(Path, method)

    def denied(self: Path, *args, **kwargs):
        if self == target:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, method, denied)


def test_unreadable_cifar_folder_is_a_dataset_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    _deny(monkeypatch, "is_dir", locked)
    with pytest.raises(DatasetError, match=r"cannot read .*locked.*Permission denied"):
        load_cifar10(locked)


def test_unreadable_text_path_is_a_dataset_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "corpus.txt"
    locked.write_text("hello " * 100)
    _deny(monkeypatch, "is_file", locked)
    with pytest.raises(DatasetError, match="Permission denied"):
        load_text_corpus(locked, block_size=8, val_fraction=0.1, test_fraction=0.1)


class RunsACommand:
    """What a hostile mirror could ship as a batch: unpickling it calls os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["data_batch_1", CIFAR10_TEST_FILE])
def test_a_crafted_cifar10_pickle_runs_nothing_and_is_refused(cifar_root: Path, tmp_path: Path, name: str) -> None:
    marker = tmp_path / "pwned"
    with (cifar_root / name).open("wb") as f:
        pickle.dump({b"data": RunsACommand(marker), b"labels": [0]}, f, protocol=2)
    with pytest.raises(DatasetError, match=r"not a CIFAR-10 batch: it calls posix.system; nothing in it was run"):
        load_cifar10(cifar_root)
    assert not marker.exists()


def test_a_crafted_cifar10_pickle_is_one_line_with_exit_2_from_the_command_line(
    cifar_root: Path, tmp_path: Path, workdir: Path, capsys
) -> None:
    from test_cli import check_usage_error

    marker = tmp_path / "pwned"
    with (cifar_root / "data_batch_3").open("wb") as f:
        pickle.dump({b"data": RunsACommand(marker), b"labels": [0]}, f, protocol=2)
    argv = ["heuristic", "--task", "cifar10", "--data-dir", str(cifar_root), "--run-dir", str(tmp_path / "run")]
    check_usage_error(capsys, argv, "not a CIFAR-10 batch")
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_a_batch_whose_data_is_not_a_uint8_array_is_corrupt(cifar_root: Path) -> None:
    write_cifar_batch(cifar_root / "data_batch_4", np.zeros((3, 3072), dtype=np.float64), [0, 1, 2])
    with pytest.raises(DatasetError, match="expected a uint8 NumPy array"):
        load_cifar10(cifar_root)


def test_with_samples_per_epoch_changes_only_the_training_draw() -> None:
    data = indexed_images(100).with_samples_per_epoch(30)
    labels = torch.cat([y for _, y in data.train_batches(10, torch.Generator().manual_seed(0))])
    assert labels.numel() == 30 and labels.unique().numel() == 30
    full = indexed_images(100)
    assert torch.equal(data.val_x, full.val_x) and torch.equal(data.test_y, full.test_y)
    with pytest.raises(ValueError, match="101 samples per epoch exceed the 100 training images"):
        full.with_samples_per_epoch(101)


def test_token_data_with_samples_per_epoch_draws_that_many_windows() -> None:
    train, val, test = split_tokens(pydoc_topics_bytes()[:20_000], val_fraction=0.2, test_fraction=0.1)
    data = TokenData(train, val, test, block_size=16, train_windows_per_epoch=128, max_eval_windows=32)
    windows = sum(x.shape[0] for x, _ in data.with_samples_per_epoch(48).train_batches(16, torch.Generator()))
    assert windows == 48
