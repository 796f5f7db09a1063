"""What a ``torch.save`` checkpoint holds, read without unpickling it (torch-free).

A ``.pt`` file is a zip archive: ``<name>/data.pkl`` (a pickle of the state dict whose tensors
are persistent references to storages) and ``<name>/data/<key>`` (each storage's raw bytes).
Unpickling runs whatever callables the pickle names, so instead of loading it this module walks
its opcodes with a small stack machine that never imports or calls anything: every GLOBAL must
be one of the few that ``torch.load(weights_only=True)`` needs for a state dict (tensor rebuild
functions, storage types, OrderedDict), every opcode one a state dict uses. What comes out is
the same nested structure with :class:`TensorRef` in place of tensors, so verification learns
every tensor's name and shape, and whether each storage is really there, in milliseconds.
"""

from __future__ import annotations

import pickletools  # nosec B403
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.file_limits import MAX_PICKLE_BYTES

# storage type → (safetensors-style dtype name, bytes per element)
STORAGE_TYPES = {
    "FloatStorage": ("F32", 4), "DoubleStorage": ("F64", 8), "HalfStorage": ("F16", 2),
    "BFloat16Storage": ("BF16", 2), "LongStorage": ("I64", 8), "IntStorage": ("I32", 4),
    "ShortStorage": ("I16", 2), "CharStorage": ("I8", 1), "ByteStorage": ("U8", 1),
    "BoolStorage": ("BOOL", 1),
}
REBUILD_TENSOR = {"_rebuild_tensor_v2", "_rebuild_tensor"}
REBUILD_PARAMETER = {"_rebuild_parameter", "_rebuild_parameter_with_state"}
ALLOWED_GLOBALS = {
    ("collections", "OrderedDict"), ("torch", "Size"), ("_codecs", "encode"),
    ("builtins", "set"), ("builtins", "frozenset"), ("__builtin__", "set"),
    ("__builtin__", "frozenset"),
    *(("torch._utils", name) for name in REBUILD_TENSOR | REBUILD_PARAMETER),
    *(("torch", name) for name in STORAGE_TYPES),
}
MAX_ZIP_ENTRIES = 100_000
MAX_CONTAINER_ITEMS = 1_000_000


class UnsafeCheckpointError(ValueError):
    """The pickle names something other than tensors and plain containers."""


class CheckpointFormatError(ValueError):
    """Not a readable torch checkpoint (damaged, truncated or another format)."""


@dataclass(frozen=True)
class Global:
    module: str
    name: str


@dataclass(frozen=True)
class StorageRef:
    key: str
    dtype: str
    item_bytes: int


@dataclass(frozen=True)
class TensorRef:
    storage: StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    def bytes_needed(self) -> int:
        """Bytes of the storage this view reaches: (offset + furthest element + 1) × item."""
        if any(dim == 0 for dim in self.shape):
            return 0
        furthest = sum((dim - 1) * step for dim, step in zip(self.shape, self.stride, strict=True))
        return (self.offset + furthest + 1) * self.storage.item_bytes


@dataclass(frozen=True)
class Checkpoint:
    """The unpickled structure (dicts, lists, tuples, numbers, strings, TensorRef)."""

    root: Any
    storages: dict[str, int]  # storage key -> bytes in the archive


class _Mark:
    pass


_MARK = _Mark()


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise CheckpointFormatError(f"a tensor with a damaged {what}")
    return value


def _call(func: Global, args: Any) -> Any:
    """What an allowed callable would return, built from data only."""
    if not isinstance(args, tuple):
        raise CheckpointFormatError("a call without an argument tuple")
    name = func.name
    if name in REBUILD_TENSOR:
        if len(args) < 4 or not isinstance(args[0], StorageRef):
            raise CheckpointFormatError("a tensor without its storage")
        offset = args[1]
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise CheckpointFormatError("a tensor with a damaged storage offset")
        shape, stride = _int_tuple(args[2], "shape"), _int_tuple(args[3], "stride")
        if len(shape) != len(stride):
            raise CheckpointFormatError("a tensor whose shape and stride differ in length")
        return TensorRef(args[0], offset, shape, stride)
    if name in REBUILD_PARAMETER:
        return args[0] if args else None
    if name == "OrderedDict":
        return dict(args[0]) if args and isinstance(args[0], list) else {}
    if name in ("Size", "set", "frozenset"):
        return tuple(args[0]) if args and isinstance(args[0], (list, tuple)) else ()
    return b""  # _codecs.encode: bytes, whose content we do not need


def _persistent(pid: Any) -> StorageRef:
    if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"
            and isinstance(pid[1], Global) and pid[1].name in STORAGE_TYPES):
        raise CheckpointFormatError("a storage reference of an unknown kind")
    dtype, item = STORAGE_TYPES[pid[1].name]
    return StorageRef(str(pid[2]), dtype, item)


class _Machine:
    """The pickle virtual machine, restricted to data: no import, no call, no attribute set."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.memo: dict[Any, Any] = {}

    def pop_mark(self) -> list[Any]:
        items: list[Any] = []
        while self.stack:
            item = self.stack.pop()
            if item is _MARK:
                items.reverse()
                return items
            items.append(item)
        raise CheckpointFormatError("pickle stack underflow")

    def run(self, data: bytes) -> Any:
        stack, memo = self.stack, self.memo
        for opcode, arg, _pos in pickletools.genops(data):
            name = opcode.name
            if name in _VALUE_OPCODES:  # the common opcodes first: 1,000 tensors per file
                stack.append(arg)
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[arg] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                stack.append(memo[arg])
            elif name == "STOP":
                return stack.pop()
            else:
                self.step(name, arg)
        raise CheckpointFormatError("the pickle has no end (truncated?)")

    def step(self, name: str, arg: Any) -> None:
        stack = self.stack
        if name in ("PROTO", "FRAME"):
            return
        if name in ("GLOBAL", "STACK_GLOBAL"):
            module, attr = (arg.split(" ", 1) if name == "GLOBAL"
                            else (stack.pop(-2), stack.pop()))
            if (module, attr) not in ALLOWED_GLOBALS:
                raise UnsafeCheckpointError(f"{str(module)[:60]}.{str(attr)[:60]}")
            stack.append(Global(module, attr))
        elif name == "REDUCE":
            args, func = stack.pop(), stack.pop()
            if not isinstance(func, Global):
                raise UnsafeCheckpointError("a call of something that is not a known function")
            stack.append(_call(func, args))
        elif name in ("BINPERSID", "PERSID"):
            stack.append(_persistent(stack.pop() if name == "BINPERSID" else arg))
        elif name == "BUILD":
            stack.pop()  # state of a rebuilt parameter or dict: not needed for shapes
        elif name == "MARK":
            stack.append(_MARK)
        elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET"):
            stack.append({"EMPTY_DICT": {}, "EMPTY_LIST": [], "EMPTY_TUPLE": (),
                          "EMPTY_SET": []}[name])
        elif name in ("DICT", "LIST", "TUPLE", "FROZENSET"):
            items = self.pop_mark()
            stack.append(dict(zip(items[::2], items[1::2], strict=False)) if name == "DICT"
                         else items if name == "LIST" else tuple(items))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            count = int(name[-1])
            if len(stack) < count:
                raise CheckpointFormatError("pickle stack underflow")
            items, stack[-count:] = stack[-count:], []
            stack.append(tuple(items))
        elif name in ("SETITEM", "SETITEMS", "APPEND", "APPENDS", "ADDITEMS"):
            self.fill(name)
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = stack[-1]
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "DUP":
            stack.append(stack[-1])
        elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
            stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name])
        elif name in _VALUE_OPCODES:
            stack.append(arg)
        else:
            raise UnsafeCheckpointError(f"pickle opcode {name}")

    def fill(self, name: str) -> None:
        items = [self.stack.pop()] if name in ("APPEND",) else (
            [self.stack.pop(-2), self.stack.pop()] if name == "SETITEM" else self.pop_mark())
        target = self.stack[-1]
        if isinstance(target, dict) and name.startswith("SETITEM"):
            for key, value in zip(items[::2], items[1::2], strict=False):
                if not isinstance(key, (str, int, float, tuple, bool)) and key is not None:
                    raise CheckpointFormatError("a dict key that is not a plain value")
                target[key] = value
        elif isinstance(target, list) and not name.startswith("SETITEM"):
            target.extend(items)
        else:
            raise CheckpointFormatError(f"{name} on a {type(target).__name__}")
        if len(target) > MAX_CONTAINER_ITEMS:
            raise CheckpointFormatError("a container with too many items")


_VALUE_OPCODES = {
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8",
}


def _pickle_name(archive: zipfile.ZipFile) -> tuple[str, str]:
    names = archive.namelist()
    if len(names) > MAX_ZIP_ENTRIES:
        raise CheckpointFormatError(f"an archive of {len(names):,} entries")
    pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        raise CheckpointFormatError("not a PyTorch checkpoint archive (no single data.pkl)")
    return pickles[0], pickles[0][: -len("data.pkl")]


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint's structure with TensorRefs, checked against the archive: every storage
    a tensor uses is present, stored uncompressed and long enough for the tensor.

    Raises UnsafeCheckpointError (a pickle that could run code) or CheckpointFormatError."""
    try:
        with zipfile.ZipFile(path) as archive:
            pkl, prefix = _pickle_name(archive)
            info = archive.getinfo(pkl)
            if info.file_size > MAX_PICKLE_BYTES:
                raise CheckpointFormatError(f"data.pkl of {info.file_size:,} bytes (at most "
                                            f"{MAX_PICKLE_BYTES:,})")
            data = archive.read(pkl)
            entries = {n[len(prefix) + len("data/"):]: archive.getinfo(n)
                       for n in archive.namelist() if n.startswith(prefix + "data/")}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as exc:
        raise CheckpointFormatError(f"not a readable zip archive, truncated? ({exc})") from exc
    try:
        root = _Machine().run(data)
    except (ValueError, KeyError, IndexError, TypeError, RecursionError, MemoryError) as exc:
        if isinstance(exc, (UnsafeCheckpointError, CheckpointFormatError)):
            raise
        raise CheckpointFormatError(f"its pickle is damaged ({type(exc).__name__})") from exc
    storages = {key: entry.file_size for key, entry in entries.items()}
    for tensor in tensors_in(root):
        entry = entries.get(tensor.storage.key)
        if entry is None:
            raise CheckpointFormatError(f"storage {tensor.storage.key} is missing")
        if entry.file_size < tensor.bytes_needed():
            raise CheckpointFormatError(f"storage {tensor.storage.key} is shorter "
                                        f"({entry.file_size:,} bytes) than its tensor needs "
                                        f"({tensor.bytes_needed():,})")
    return Checkpoint(root, storages)


def tensors_in(value: Any) -> list[TensorRef]:
    """Every TensorRef in a nested structure; each container is walked once, however often
    the pickle's memo shares it (a shared list nested 32 deep would otherwise mean 2**32
    visits)."""
    found: list[TensorRef] = []
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, TensorRef):
            found.append(item)
        elif isinstance(item, (dict, list, tuple)) and id(item) not in seen:
            seen.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
    return found


def state_dict_shapes(checkpoint: Checkpoint) -> dict[str, tuple[int, ...]]:
    """Tensor shapes by key, as the codec loader reads a checkpoint (``read_pt``): the top-level
    mapping, or its ``state_dict`` entry when that is a mapping; non-tensor values (training
    counters such as epoch/step) are left out."""
    data = checkpoint.root
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]
    if not isinstance(data, dict):
        raise CheckpointFormatError("it does not hold a state dict")
    return {str(k): v.shape for k, v in data.items() if isinstance(v, TensorRef)}
