"""Datasets held in memory as tensors, with torch-only batching and augmentation.

Two embedded datasets need no download: procedural shapes (images) and the English text of
Python's own `pydoc_data.topics`. Real datasets (CIFAR-10, TinyStories-style text) are read
from disk and fail loudly when missing or corrupt; nothing is ever substituted for them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
import torch


class DatasetError(ValueError):
    """A dataset is missing, unreadable or malformed. The message names the path and the problem."""


def _os_errors_are_dataset_errors(load: Callable[P, R]) -> Callable[P, R]:
    """A permission or I/O failure anywhere in a loader becomes a `DatasetError` naming the path."""

    @functools.wraps(load)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return load(*args, **kwargs)
        except OSError as exc:
            raise DatasetError(f"cannot read {str(exc.filename)!r}: {exc.strerror or exc}") from exc

    return wrapper


Batch = tuple[torch.Tensor, torch.Tensor]
P = ParamSpec("P")
R = TypeVar("R")


# --------------------------------------------------------------------------- containers
SPLITS: tuple[str, ...] = ("train", "val", "test")
"""Every task has three splits. `train` trains the host (and calibrates its BatchNorm
statistics); `val` is the selection split, the only one any decision reads (gates, controllers,
governor, reward, observation); `test` is read once at the end of an episode, to report."""


@dataclass
class ImageData:
    """Images as float (N, C, H, W), already normalised; labels int64 (N,). Three splits."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    augment: bool  # random crop (pad 2 px per 16 px of side) and horizontal flip, CIFAR style
    samples_per_epoch: int | None = None
    """Draw this many training images per epoch from the pool; None means one full pass."""
    calibration_size: int = 2000
    """Training images (the first of the split, not augmented) on which BatchNorm statistics are
    recomputed before each validation."""

    def to(self, device: torch.device) -> ImageData:
        tensors = (self.train_x, self.train_y, self.val_x, self.val_y, self.test_x, self.test_y)
        return ImageData(
            *(t.to(device) for t in tensors),
            self.num_classes,
            self.augment,
            self.samples_per_epoch,
            self.calibration_size,
        )

    def split_sizes(self) -> dict[str, int]:
        return {"train": self.train_x.shape[0], "val": self.val_x.shape[0], "test": self.test_x.shape[0]}

    def with_samples_per_epoch(self, n: int) -> ImageData:
        """These data drawing `n` training images per epoch: a cheaper (or dearer) training
        variant of the same task, whose selection and test splits are untouched."""
        pool = self.train_x.shape[0]
        if n > pool:
            raise ValueError(f"{n} samples per epoch exceed the {pool} training images")
        return dataclasses.replace(self, samples_per_epoch=n)

    def epoch_sample_count(self, batch_size: int) -> int:
        """Images one epoch of `train_batches(batch_size, ...)` trains on (the ragged last batch
        dropped), known before the epoch runs: a compute budget projects with it."""
        drawn = min(self.train_x.shape[0], self.samples_per_epoch or self.train_x.shape[0])
        return drawn // batch_size * batch_size

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """One epoch of shuffled batches. `generator` lives on the CPU; indices move to the data."""
        n = self.train_x.shape[0]
        order = torch.randperm(n, generator=generator)[: self.samples_per_epoch].to(self.train_x.device)
        for start in range(0, order.numel() - batch_size + 1, batch_size):  # drop the ragged last batch
            idx = order[start : start + batch_size]
            x = self.train_x[idx]
            if self.augment:
                x = random_crop_flip(x, pad=max(1, x.shape[-1] // 8), generator=generator)
            yield x, self.train_y[idx]

    def calibration_batches(self, batch_size: int) -> Iterator[Batch]:
        return _in_order(self.train_x[: self.calibration_size], self.train_y[: self.calibration_size], batch_size)

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return _in_order(self.val_x, self.val_y, batch_size)

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        return _in_order(self.test_x, self.test_y, batch_size)


def _in_order(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> Iterator[Batch]:
    for start in range(0, x.shape[0], batch_size):
        yield x[start : start + batch_size], y[start : start + batch_size]


@dataclass
class TokenData:
    """A byte stream in three splits of tokens (int64)."""

    train_tokens: torch.Tensor
    val_tokens: torch.Tensor
    test_tokens: torch.Tensor
    block_size: int
    train_windows_per_epoch: int
    max_eval_windows: int
    """At most this many windows of the validation and test splits are read, and of the start of
    the training split for BatchNorm calibration."""

    def to(self, device: torch.device) -> TokenData:
        return TokenData(
            self.train_tokens.to(device),
            self.val_tokens.to(device),
            self.test_tokens.to(device),
            self.block_size,
            self.train_windows_per_epoch,
            self.max_eval_windows,
        )

    def with_samples_per_epoch(self, n: int) -> TokenData:
        """These data drawing `n` training windows per epoch (see `ImageData.with_samples_per_epoch`)."""
        return dataclasses.replace(self, train_windows_per_epoch=n)

    def split_sizes(self) -> dict[str, int]:
        """Tokens the training split holds, and tokens scored in the selection and test splits
        (at most `max_eval_windows` windows of each are read)."""
        return {
            "train": self.train_tokens.numel(),
            "val": self._windows_read(self.val_tokens) * self.block_size,
            "test": self._windows_read(self.test_tokens) * self.block_size,
        }

    def epoch_sample_count(self, batch_size: int) -> int:
        """Windows one epoch of `train_batches(batch_size, ...)` trains on (see `ImageData`'s)."""
        return self.train_windows_per_epoch // batch_size * batch_size

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """`train_windows_per_epoch` random windows, as (inputs, next-byte targets)."""
        span = self.train_tokens.shape[0] - self.block_size - 1
        starts = torch.randint(0, span, (self.train_windows_per_epoch,), generator=generator)
        starts = starts.to(self.train_tokens.device)
        offsets = torch.arange(self.block_size + 1, device=self.train_tokens.device)
        for b in range(0, self.train_windows_per_epoch - batch_size + 1, batch_size):
            windows = self.train_tokens[starts[b : b + batch_size, None] + offsets]
            yield windows[:, :-1], windows[:, 1:]

    def calibration_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._windows(self.train_tokens, batch_size)

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._windows(self.val_tokens, batch_size)

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        return self._windows(self.test_tokens, batch_size)

    def _windows_read(self, tokens: torch.Tensor) -> int:
        return min((tokens.shape[0] - 1) // self.block_size, self.max_eval_windows)

    def _windows(self, tokens: torch.Tensor, batch_size: int) -> Iterator[Batch]:
        """Consecutive non-overlapping windows from the start of `tokens`."""
        t = self.block_size
        n = self._windows_read(tokens)
        windows = tokens[: n * t + 1]
        xs = windows[:-1].view(n, t)
        ys = windows[1:].view(n, t)
        return _in_order(xs, ys, batch_size)


TaskData = ImageData | TokenData


# --------------------------------------------------------------------------- augmentation
def random_crop_flip(x: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Per-image random crop from a zero-padded copy, then a random horizontal flip."""
    n, _, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(x.device)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(x.device)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    chan = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
    out = padded[batch, chan, rows, cols]
    flip = (torch.rand(n, generator=generator) < 0.5).to(x.device)
    return torch.where(flip[:, None, None, None], out.flip(-1), out)


def normalize_channels(train: torch.Tensor, *others: torch.Tensor) -> list[torch.Tensor]:
    """Standardise every tensor with the per-channel mean and std of the training images."""
    mean = train.mean(dim=(0, 2, 3), keepdim=True)
    std = train.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    return [(t - mean) / std for t in (train, *others)]


# --------------------------------------------------------------------------- procedural shapes
SHAPE_CLASSES: tuple[str, ...] = (
    "disk",
    "ring",
    "square",
    "square_outline",
    "triangle",
    "plus",
    "cross",
    "two_dots",
    "bar",
    "half_disk",
)


def _rotate(x: torch.Tensor, y: torch.Tensor, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c, s = torch.cos(theta), torch.sin(theta)
    return c * x + s * y, -s * x + c * y


def _shape_mask(label: int, x: torch.Tensor, y: torch.Tensor, size: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Signed 'inside' score (>0 inside) of shape `label` on grids x, y of shape (n, H, W)."""
    r = size
    u, v = _rotate(x, y, theta)
    rad = torch.sqrt(x * x + y * y)
    thick = 0.28 * r
    if label == 0:
        return r - rad
    if label == 1:
        return thick / 2 - (rad - 0.8 * r).abs()
    if label == 2:
        return 0.85 * r - torch.maximum(u.abs(), v.abs())
    if label == 3:
        return thick / 2 - (torch.maximum(u.abs(), v.abs()) - 0.75 * r).abs()
    if label == 4:
        # equilateral triangle: intersection of three half-planes
        d = torch.stack([v * math.cos(a) + u * math.sin(a) for a in (0.0, 2 * math.pi / 3, 4 * math.pi / 3)])
        return 0.5 * r - d.max(dim=0).values
    if label in (5, 6):
        uu, vv = (u, v) if label == 5 else _rotate(u, v, torch.full_like(theta, math.pi / 4))
        arm = torch.maximum(
            torch.minimum(thick / 2 - uu.abs(), r - vv.abs()), torch.minimum(thick / 2 - vv.abs(), r - uu.abs())
        )
        return arm
    if label == 7:
        a = torch.sqrt((u - 0.55 * r) ** 2 + v**2)
        b = torch.sqrt((u + 0.55 * r) ** 2 + v**2)
        return 0.38 * r - torch.minimum(a, b)
    if label == 8:
        return torch.minimum(thick / 1.5 - v.abs(), 1.1 * r - u.abs())
    if label == 9:
        return torch.minimum(r - rad, v)
    raise ValueError(f"unknown shape class {label}")


def procedural_shapes(
    n: int, seed: int, image_size: int = 16, noise: float = 0.12
) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` RGB images of `image_size` pixels, each showing one of ten shapes, deterministic from `seed`.

    Nuisances that make it a learning problem rather than a lookup: random position, size and
    rotation (small for the orientation-defined plus/cross), random foreground and background
    colours, a random illumination gradient, a random distractor blob and pixel noise.
    Returns float images in [0, 1]-ish (N, 3, S, S) and int64 labels (N,).
    """
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % len(SHAPE_CLASSES)
    labels = labels[torch.randperm(n, generator=g)]
    coords = torch.linspace(-1.0, 1.0, image_size)
    gy, gx = torch.meshgrid(coords, coords, indexing="ij")

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=g)

    cx, cy = (rand(n) - 0.5) * 0.7, (rand(n) - 0.5) * 0.7
    size = 0.35 + 0.3 * rand(n)
    theta = rand(n) * 2 * math.pi
    small_tilt = (rand(n) - 0.5) * math.radians(30)
    x = gx[None] - cx[:, None, None]
    y = gy[None] - cy[:, None, None]
    inside = torch.empty(n, image_size, image_size)
    for label in range(len(SHAPE_CLASSES)):
        sel = labels == label
        if not sel.any():
            continue
        angle = small_tilt[sel] if label in (2, 3, 5, 6) else theta[sel]
        inside[sel] = _shape_mask(label, x[sel], y[sel], size[sel, None, None], angle[:, None, None])
    pixel = 2.0 / image_size
    mask = torch.sigmoid(inside / (0.5 * pixel))

    # distractor: a small soft blob somewhere else
    bx, by = (rand(n) - 0.5) * 1.8, (rand(n) - 0.5) * 1.8
    blob = torch.exp(-((gx[None] - bx[:, None, None]) ** 2 + (gy[None] - by[:, None, None]) ** 2) / (2 * 0.12**2))

    fg, bg, blob_c = rand(n, 3), rand(n, 3), rand(n, 3)
    fg = torch.where(((fg - bg).abs().sum(1, keepdim=True) < 0.6), 1.0 - bg, fg)  # keep some contrast
    light = 1.0 + 0.4 * (rand(n, 1, 1) - 0.5) * gx[None] + 0.4 * (rand(n, 1, 1) - 0.5) * gy[None]
    img = bg[:, :, None, None] * (1 - mask[:, None]) + fg[:, :, None, None] * mask[:, None]
    img = img * (1 - 0.8 * blob[:, None]) + blob_c[:, :, None, None] * 0.8 * blob[:, None]
    img = img * light[:, None] + noise * torch.randn(n, 3, image_size, image_size, generator=g)
    return img.float(), labels


def shapes_streams(seed: int) -> tuple[int, int, int]:
    """The generator seeds of the training pool, selection split and test split of `shapes`
    data seed `seed`: disjoint streams, so a further stream (a fresh sample) can avoid them."""
    return 3 * seed, 3 * seed + 1, 3 * seed + 2


@functools.lru_cache(maxsize=4)
def load_shapes(
    seed: int, n_train: int, n_val: int, n_test: int, image_size: int, samples_per_epoch: int | None
) -> ImageData:
    """A training pool, a selection split and a test split from disjoint generator streams of
    the same seed. Cached per process: the tensors are never modified in place, so every env can
    share them."""
    train_stream, val_stream, test_stream = shapes_streams(seed)
    tx, ty = procedural_shapes(n_train, seed=train_stream, image_size=image_size)
    vx, vy = procedural_shapes(n_val, seed=val_stream, image_size=image_size)
    sx, sy = procedural_shapes(n_test, seed=test_stream, image_size=image_size)
    tx, vx, sx = normalize_channels(tx, vx, sx)
    return ImageData(
        tx, ty, vx, vy, sx, sy, num_classes=len(SHAPE_CLASSES), augment=False, samples_per_epoch=samples_per_epoch
    )


# --------------------------------------------------------------------------- CIFAR-10
CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_FILE = "test_batch"


def find_cifar10_dir(data_dir: Path) -> Path:
    """Accept the `cifar-10-batches-py` folder itself or a folder that contains it."""
    if not data_dir.is_dir():
        raise DatasetError(f"CIFAR-10 data folder {str(data_dir)!r} does not exist or is not a folder")
    for candidate in (data_dir, data_dir / "cifar-10-batches-py"):
        if (candidate / CIFAR10_TEST_FILE).exists():
            return candidate
    raise DatasetError(
        f"no CIFAR-10 python batches in {str(data_dir)!r}: expected {', '.join(CIFAR10_TRAIN_FILES)} and "
        f"{CIFAR10_TEST_FILE} (the 'cifar-10-batches-py' folder of the python version)"
    )


CIFAR10_PICKLE_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # how a Python 3 pickle of protocol 2 spells bytes
    }
)
"""The only callables a CIFAR-10 python batch refers to: NumPy's array rebuilding (the `data`
array) and, in files written by Python 3, the bytes constructor. Nothing else is ever called."""


class CifarUnpickler(pickle.Unpickler):
    """A pickle reader for CIFAR-10 batches that admits only what the real format holds.

    Why: a pickle can name any callable, and `pickle.load` calls it; a `data_batch_1` from an
    untrusted mirror could run code as the file is read. This reader builds dicts, lists, bytes,
    str, ints and NumPy arrays, and refuses any other callable before calling it.
    """

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in CIFAR10_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"not a CIFAR-10 batch: it calls {module}.{name}")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    if not path.is_file():
        raise DatasetError(f"CIFAR-10 file {str(path)!r} is missing")
    try:
        with path.open("rb") as f:
            entry = CifarUnpickler(f, encoding="bytes").load()
        data, labels = entry[b"data"], entry[b"labels"]
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
            raise DatasetError(
                f"CIFAR-10 file {str(path)!r} is corrupt: data is {type(data).__name__} "
                f"{getattr(data, 'dtype', '')}, expected a uint8 NumPy array"
            )
        if not isinstance(labels, list) or not all(isinstance(label, int) for label in labels):
            raise DatasetError(f"CIFAR-10 file {str(path)!r} is corrupt: labels are not a list of ints")
        if getattr(data, "ndim", None) != 2 or data.shape[1] != 3 * 32 * 32:
            raise DatasetError(
                f"CIFAR-10 file {str(path)!r} is corrupt: data has shape {getattr(data, 'shape', None)}, "
                "expected (n, 3072) rows of channel-first 32x32 RGB"
            )
        images = torch.as_tensor(data, dtype=torch.uint8).reshape(-1, 3, 32, 32)
        targets = torch.as_tensor(labels, dtype=torch.int64)
    except DatasetError:
        raise
    except pickle.UnpicklingError as exc:
        if str(exc).startswith("not a CIFAR-10 batch"):
            raise DatasetError(f"CIFAR-10 file {str(path)!r} is corrupt: {exc}; nothing in it was run") from exc
        raise DatasetError(f"CIFAR-10 file {str(path)!r} is corrupt: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        raise DatasetError(f"CIFAR-10 file {str(path)!r} is corrupt: {type(exc).__name__}: {exc}") from exc
    if images.shape[0] != targets.shape[0] or targets.numel() == 0 or not bool(((targets >= 0) & (targets < 10)).all()):
        raise DatasetError(
            f"CIFAR-10 file {str(path)!r} is corrupt: labels do not match the images or are outside 0..9"
        )
    return images, targets


CIFAR10_SELECTION_FRACTION = 0.1
"""The selection split is the last tenth of the training batches (5,000 of 50,000); the official
`test_batch` is the test split, which no decision reads."""


@_os_errors_are_dataset_errors
def load_cifar10(data_dir: Path) -> ImageData:
    root = find_cifar10_dir(data_dir)
    parts = [_read_cifar_batch(root / name) for name in CIFAR10_TRAIN_FILES]
    images = torch.cat([p[0] for p in parts]).float() / 255.0
    labels = torch.cat([p[1] for p in parts])
    n_val = int(images.shape[0] * CIFAR10_SELECTION_FRACTION)
    if n_val < 1 or n_val == images.shape[0]:
        raise DatasetError(
            f"CIFAR-10 training batches in {str(root)!r} hold {images.shape[0]} images: "
            "too few to carve a selection split"
        )
    cut = images.shape[0] - n_val
    sx, sy = _read_cifar_batch(root / CIFAR10_TEST_FILE)
    tx, vx, sx = normalize_channels(images[:cut], images[cut:], sx.float() / 255.0)
    return ImageData(tx, labels[:cut], vx, labels[cut:], sx, sy, num_classes=10, augment=True)


# --------------------------------------------------------------------------- text
def _bytes_tensor(data: bytes) -> torch.Tensor:
    if not data:  # torch.frombuffer refuses an empty buffer
        return torch.empty(0, dtype=torch.int64)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)


def split_tokens(data: bytes, val_fraction: float, test_fraction: float) -> tuple[torch.Tensor, ...]:
    """Train, selection and test tokens: the last `test_fraction` of the bytes is the test split,
    the `val_fraction` before it the selection split."""
    for name, fraction in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {fraction}")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction must leave training text, got {val_fraction} + {test_fraction}")
    tokens = _bytes_tensor(data)
    n = tokens.numel()
    val_start, test_start = int(n * (1.0 - val_fraction - test_fraction)), int(n * (1.0 - test_fraction))
    return tokens[:val_start], tokens[val_start:test_start], tokens[test_start:]


def pydoc_topics_bytes() -> bytes:
    """The English reference text that ships with CPython (`pydoc_data.topics`), in key order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")


def _read_text_file(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read text file {str(path)!r}: {exc.strerror}") from exc
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"text file {str(path)!r} is not UTF-8 text (byte {exc.start})") from exc
    if b"\x00" in data:
        raise DatasetError(f"text file {str(path)!r} holds NUL bytes: not a text corpus")
    if not data:
        raise DatasetError(f"text file {str(path)!r} is empty: a text corpus needs text")
    return data


@_os_errors_are_dataset_errors
def load_text_corpus(
    data_dir: Path, block_size: int, val_fraction: float, test_fraction: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TinyStories-style corpus in three splits. A folder with `*train*.txt` and `*valid*.txt`
    files: the official validation text is the test split, and the selection split is the last
    `val_fraction` of the training text. One `.txt` file (or a folder with exactly one): split by
    `val_fraction` and `test_fraction`."""
    if data_dir.is_file():
        train, val, test = split_tokens(_read_text_file(data_dir), val_fraction, test_fraction)
    elif data_dir.is_dir():
        train_files = sorted(data_dir.glob("*train*.txt"))
        valid_files = sorted(data_dir.glob("*valid*.txt"))
        all_txt = sorted(data_dir.glob("*.txt"))
        if train_files and valid_files:
            train, val, _ = split_tokens(b"".join(_read_text_file(p) for p in train_files), val_fraction, 0.0)
            test = _bytes_tensor(b"".join(_read_text_file(p) for p in valid_files))
        elif len(all_txt) == 1:
            train, val, test = split_tokens(_read_text_file(all_txt[0]), val_fraction, test_fraction)
        else:
            raise DatasetError(
                f"text folder {str(data_dir)!r} needs *train*.txt and *valid*.txt files, or exactly one .txt file; "
                f"found {len(all_txt)} .txt files"
            )
    else:
        raise DatasetError(f"text data path {str(data_dir)!r} does not exist")
    for name, part in (("training", train), ("selection", val), ("test", test)):
        if part.numel() < 2 * (block_size + 1):
            raise DatasetError(
                f"{name} text in {str(data_dir)!r} is too short: {part.numel()} bytes, "
                f"need at least {2 * (block_size + 1)}"
            )
    return train, val, test
