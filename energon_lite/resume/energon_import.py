"""A state saved by Megatron-Energon 7.x, read as plain data: no Energon, no arbitrary pickle.

``SavableDataLoader.save_state_rank()`` of Megatron-Energon 7.x returns a
``SavableDataLoaderState`` (``save_state_global()`` a list of them, one per rank), which
users keep with ``torch.save`` or ``pickle``. Reading those bytes with ``pickle`` would need
megatron-energon installed and would run whatever the file names. :func:`read_energon_state`
reads them with a restricted unpickler instead: the only classes it builds are Energon's state
records, each as a dict of its fields; the process-global random states inside (torch and
numpy arrays, which the import does not need) become ``None`` without being built; any other
class the file names is refused, naming it. A wrapper's own generator state (``_worker_rng``)
stays bytes: it replays Energon's draws (:mod:`energon_lite.resume.energon_replay`). Objects
already loaded (where megatron-energon is installed) are read the same way, field by field.

The plain form, one per rank::

    {"type": "EnergonState", "next_worker": <int>, "micro_batch_size": <int or None>,
     "workers": [{"offset": <batches delivered after the snapshot>,
                  "dataset": <the dataset tree at the snapshot, or None before any>}, ...]}

A dataset tree is Energon's own: each level ``{"__class__": <wrapper>, <its saved fields>,
"datasets": [<inner levels>]}``, a slice position ``{"index", "current"}``, restore keys as
lists. With worker processes Energon saves each worker's last snapshot plus how many batches
the worker delivered after it (``offset``); without, the current state and offset 0.
What the tree means for the samples still owed is :mod:`energon_lite.resume.energon_state`.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import zipfile
from collections import OrderedDict
from typing import IO, Any

from energon_lite.errors import StateError, short_repr

ENERGON_TYPE = "EnergonState"
_PACKAGE = "megatron.energon"
# the records Energon 7.x pickles in a loader state (each becomes a dict of its fields)
RECORDS = frozenset(
    {
        "SavableDataLoaderState",
        "SavableDatasetCheckpoint",
        "SavableDatasetState",
        "SavableCheckpoint",
        "SliceState",
    }
)
_DICTS = frozenset({"FlexState"})  # Energon's dict subclass
_DROPPED = frozenset({"SystemRngState"})  # the global random states: not needed here
# what a torch.save / pickle of those records names besides them: arrays and tensors of the
# random states (never built), and the few harmless builtins pickle uses for plain data
_ARRAYS = {
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "scalar"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch.storage", "_load_from_bytes"),
}
_STORAGES = {"ByteStorage", "UntypedStorage", "LongStorage", "IntStorage", "FloatStorage"}
_ZIP_MAGIC = b"PK\x03\x04"


class _Dropped:
    """Stands for an array or tensor the file holds: accepts anything, keeps nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


class _Record:
    """One of Energon's state records, as the name of its class and its fields."""

    record_name = ""

    def __setstate__(self, state: Any) -> None:
        fields: dict[str, Any] = {}
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, __slots__ values)
            for part in state:
                if isinstance(part, dict):
                    fields.update(part)
        elif isinstance(state, dict):
            fields.update(state)
        else:
            raise StateError(
                f"Energon state: {self.record_name} has fields {short_repr(state)}; corrupt"
            )
        self.__dict__["fields"] = fields


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as pickle protocol 2 uses it for bytes, and nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise StateError(f"Energon state: encode({short_repr(text)}, {encoding!r}) refused")
    return text.encode("latin1")


class _Unpickler(pickle.Unpickler):
    """Builds only what an Energon loader state holds (see the module docstring)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == _PACKAGE or module.startswith(_PACKAGE + "."):
            if name in RECORDS:
                return type(name, (_Record,), {"record_name": name})
            if name in _DICTS:
                return dict
            if name in _DROPPED:
                return _Dropped
        elif (module, name) in _ARRAYS or (module == "torch" and name in _STORAGES):
            return _Dropped
        elif (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        elif (module, name) == ("_codecs", "encode"):
            return _latin1
        elif module == "builtins" and name in ("set", "frozenset", "bytearray"):
            return {"set": set, "frozenset": frozenset, "bytearray": bytearray}[name]
        raise StateError(
            f"Energon state names {module}.{name}, which is not part of a state "
            "megatron-energon 7.x saves; refused (the file is read without running its code)"
        )

    def persistent_load(self, pid: Any) -> Any:
        return _Dropped()  # a tensor's storage in a torch.save archive: not needed


def read_energon_state(source: Any) -> Any:
    """The plain form of an Energon 7.x loader state (see the module docstring).

    ``source``: the bytes or the path of a file written by ``torch.save`` or ``pickle`` (or
    an open binary file), or the objects themselves (``save_state_rank()``'s record, or
    ``save_state_global()``'s list, loaded where megatron-energon is installed). A list
    gives a list, one plain form (or None) per rank. StateError names what is refused."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _from_object(_unpickle(bytes(source), "the bytes given"))
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        with open(path, "rb") as f:
            return _from_object(_unpickle(f.read(), path))
    if hasattr(source, "read"):
        return _from_object(_unpickle(source.read(), "the file given"))
    return _from_object(source)


def is_energon_state(value: Any) -> bool:
    """Whether ``value`` is an Energon rank state (plain or as Energon's own record), or a
    list of them (with None for ranks without one)."""
    if isinstance(value, list):
        present = [v for v in value if v is not None]
        return bool(present) and all(is_energon_state(v) for v in present)
    if isinstance(value, dict):
        return value.get("type") == ENERGON_TYPE
    return _class_name(value) == "SavableDataLoaderState"


def _unpickle(data: bytes, where: str) -> Any:
    stream: IO[bytes] = io.BytesIO(data)
    if data.startswith(_ZIP_MAGIC):  # torch.save's archive: the object is its data.pkl
        with zipfile.ZipFile(stream) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(names) != 1:
                raise StateError(f"{where}: a zip archive without one data.pkl ({names})")
            stream = io.BytesIO(archive.read(names[0]))
    try:
        out = _Unpickler(stream).load()
    except StateError as exc:
        raise StateError(f"{where}: {exc}") from None
    except Exception as exc:  # a truncated or foreign file: pickle's own errors
        raise StateError(f"{where}: not a pickled Energon state ({exc})") from None
    if isinstance(out, int) and not isinstance(out, bool):  # torch's legacy format's magic
        raise StateError(
            f"{where}: written by torch.save(..., _use_new_zipfile_serialization=False); "
            "load it with torch and save it again in torch's default format"
        )
    return out


def _class_name(value: Any) -> str | None:
    if isinstance(value, _Record):
        return value.record_name
    module = type(value).__module__ or ""
    if module == _PACKAGE or module.startswith(_PACKAGE + "."):
        return type(value).__name__
    return None


def _fields(value: Any) -> dict[str, Any]:
    if isinstance(value, _Record):
        return dict(value.__dict__.get("fields", {}))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return dict(vars(value))


def _from_object(value: Any) -> Any:
    if isinstance(value, list):
        return [None if v is None else _rank(v) for v in value]
    return _rank(value)


def _rank(value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and value.get("type") == ENERGON_TYPE:
        return value
    if _class_name(value) != "SavableDataLoaderState":
        raise StateError(
            f"not a megatron-energon loader state: {short_repr(value)} (expected what "
            "SavableDataLoader.save_state_rank() returns)"
        )
    fields = _fields(value)
    workers = fields.get("worker_states")
    if not isinstance(workers, list):
        raise StateError(f"Energon state: worker_states={short_repr(workers)} is not a list")
    return {
        "type": ENERGON_TYPE,
        "next_worker": _plain(fields.get("next_worker_id", 0)),
        "micro_batch_size": _plain(fields.get("micro_batch_size")),
        "workers": [_worker(w) for w in workers],
    }


def _worker(value: Any) -> dict[str, Any]:
    """A worker's snapshot: ``SavableDatasetCheckpoint`` (worker processes) or the dataset
    tree itself (no worker processes)."""
    if _class_name(value) != "SavableDatasetCheckpoint":
        return {"offset": 0, "dataset": _plain(value)}
    fields = _fields(value)
    snapshot = fields.get("state")
    dataset = None
    if snapshot is not None:
        dataset = _plain(_fields(snapshot).get("dataset_state"))
    return {"offset": _plain(fields.get("offset", 0)), "dataset": dataset}


def _plain(value: Any, depth: int = 0) -> Any:
    """Energon's records, dicts, tuples and scalars as plain dicts, lists and scalars."""
    if depth > 200:
        raise StateError("Energon state is nested too deeply; it is corrupt")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)  # a WorkerRng's torch generator state: replays Energon's draws
    if isinstance(value, _Dropped):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    name = _class_name(value)
    if name in _DROPPED:
        return None
    if name in RECORDS:
        out = {k: _plain(v, depth + 1) for k, v in _fields(value).items()}
        return {"__class__": name, **out}
    if type(value).__module__ in ("torch", "numpy") or hasattr(value, "__array__"):
        return None  # a tensor or array of a random state
    raise StateError(f"Energon state holds {short_repr(value)}, which is not state data")
