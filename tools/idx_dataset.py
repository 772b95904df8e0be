"""IDX files (the MNIST / Fashion-MNIST format) as numpy arrays, and the Fashion-MNIST splits of
Debian's dataset-fashion-mnist package.

    from idx_dataset import fashion_mnist
    images, labels = fashion_mnist("train")      # uint8 [60000, 28, 28], uint8 [60000]

The format (yann.lecun.com/exdb/mnist): a big-endian header of two zero bytes, a type code, the
number of dimensions, then one u32 size per dimension, then the values in C order. The files come
from outside (a package, a download, a truncated copy), so everything is checked before an array is
made: a file that is not IDX, a type this loader does not take, a size that does not match the
bytes that follow, or an image file and a label file of different lengths is an IdxError naming the
file and what is wrong. Gzipped files (Debian ships them so) are read the same way.
"""
import gzip
import os

import numpy as np

# Where `apt-get install dataset-fashion-mnist` puts the files (scripts/setup.sh installs it);
# $FASHION_MNIST_DIR overrides it.
FASHION_MNIST_DIR = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot")

# IDX type code -> numpy dtype (big-endian, as the format stores multi-byte values).
_TYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
          0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
# A bound on the declared size, checked before the product is trusted: a corrupt header must not
# ask for terabytes (Fashion-MNIST's largest file holds 47 MB).
_MAX_VALUES = 1 << 31


class IdxError(ValueError):
    """A file that is not a well-formed IDX file, or a pair of files that do not match."""


def _read_bytes(path):
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head == b"\x1f\x8b":
            try:
                return gzip.decompress(f.read())
            except (OSError, EOFError) as e:
                raise IdxError(f"{path}: a broken gzip stream ({e})") from None
        return f.read()


def parse_idx(data, name="<bytes>"):
    """The array an IDX file's bytes hold (native byte order), or IdxError naming `name`."""
    if len(data) < 4:
        raise IdxError(f"{name}: {len(data)} bytes, too short for an IDX header (4 bytes)")
    if data[0] != 0 or data[1] != 0:
        raise IdxError(f"{name}: not an IDX file (magic {data[:4].hex()}: the first two bytes "
                       "must be 0)")
    code, ndim = data[2], data[3]
    if code not in _TYPES:
        raise IdxError(f"{name}: unknown IDX type code 0x{code:02x} (known: "
                       f"{', '.join(f'0x{c:02x}' for c in _TYPES)})")
    if ndim == 0:
        raise IdxError(f"{name}: an IDX file of 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IdxError(f"{name}: {len(data)} bytes, too short for the sizes of its {ndim} "
                       f"dimensions ({header} bytes of header)")
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    count = 1
    for d in shape:
        count *= d
        if count > _MAX_VALUES:
            raise IdxError(f"{name}: declared shape {shape} holds more than {_MAX_VALUES} values")
    dtype = _TYPES[code]
    want = header + count * dtype.itemsize
    if len(data) != want:
        raise IdxError(f"{name}: shape {shape} of {dtype.name} needs {want} bytes, the file has "
                       f"{len(data)} ({'truncated' if len(data) < want else 'trailing bytes'})")
    values = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(shape)
    return values.astype(dtype.newbyteorder("="))


def read_idx(path):
    """The array of one IDX file (gzipped or not)."""
    return parse_idx(_read_bytes(path), os.fspath(path))


def read_pair(images_path, labels_path, classes=10):
    """An image file [N, H, W] uint8 and its label file [N] uint8 in [0, classes), checked to
    match."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise IdxError(f"{images_path}: images are uint8 [N, H, W], got {images.dtype} "
                       f"{list(images.shape)}")
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise IdxError(f"{labels_path}: labels are uint8 [N], got {labels.dtype} "
                       f"{list(labels.shape)}")
    if len(images) != len(labels):
        raise IdxError(f"{images_path} holds {len(images)} images but {labels_path} "
                       f"{len(labels)} labels")
    if len(labels) and int(labels.max()) >= classes:
        raise IdxError(f"{labels_path}: label {int(labels.max())} is not one of the {classes} "
                       "classes")
    return images, labels


def fashion_mnist(split, directory=None):
    """(images uint8 [N, 28, 28], labels uint8 [N]) of split 'train' (60000) or 'test' (10000)."""
    prefix = {"train": "train", "test": "t10k"}.get(split)
    if prefix is None:
        raise ValueError(f"split is 'train' or 'test', got {split!r}")
    directory = directory or FASHION_MNIST_DIR
    paths = []
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        base = os.path.join(directory, f"{prefix}-{kind}")
        found = [p for p in (base + ".gz", base) if os.path.exists(p)]
        if not found:
            raise FileNotFoundError(f"Fashion-MNIST's {base}(.gz) is missing: apt-get install "
                                    "dataset-fashion-mnist (scripts/setup.sh does), or set "
                                    "$FASHION_MNIST_DIR")
        paths.append(found[0])
    images, labels = read_pair(*paths)
    if images.shape[1:] != (28, 28):
        raise IdxError(f"{paths[0]}: Fashion-MNIST images are 28 x 28, got "
                       f"{images.shape[1]} x {images.shape[2]}")
    return images, labels


def to_input(images):
    """uint8 [N, 28, 28] -> float32 [N, 1, 28, 28] in [0, 1], the CNN's input
    (bench/quantize/fashion_mnist.py trains on that and nothing else)."""
    return (images.astype(np.float32) / 255.0)[:, None]
