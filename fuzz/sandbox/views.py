"""What a sandboxed split sees of the scheduler and the request: read-only views of the deciding process's
objects, whose attributes are read across the channel (the snapshot, :data:`SNAPSHOT`, goes with the call;
anything else is asked for during it).

Invariants: only values cross (plain data, enum members by name; any other object is a further view);
nothing of the child's is called or unpickled here; nothing a split does changes the deciding process's
objects (a view cannot be called, dunder names are not read, a write stays in the child, by the object's
serial, for the object's life).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import importlib
import itertools
import operator
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fuzz.model.checkout import owner_of, transparent_to_checkouts

# (root, path) pairs vLLM's split reads (0.32 and 0.33), sent with every call: (attribute names).
SNAPSHOT: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("self", ("cache_config",)), ("self", ("cache_config", "block_size")), ("self", ("block_size",)),
    ("self", ("hash_block_size",)), ("self", ("mamba_partial_cache_hit",)), ("self", ("use_eagle_block_drop",)),
    ("self", ("use_eagle",)), ("self", ("mamba_has_prefill_checkpoint_blocks",)),
    ("self", ("mamba_prefill_checkpoint_alignment",)), ("self", ("max_num_scheduled_tokens",)),
    ("self", ("scheduler_config",)), ("self", ("scheduler_config", "long_prefill_token_threshold")),
    ("self", ("mamba_shared_prefix_checkpoint",)), ("self", ("need_mamba_block_aligned_split",)),
    ("request", ("request_id",)), ("request", ("num_computed_tokens",)), ("request", ("num_prompt_tokens",)),
    ("request", ("num_tokens",)), ("request", ("shared_prefix_boundary",)), ("request", ("num_output_tokens",)),
)
MAX_ITEMS = 1 << 20  # a list or dict longer than this crosses as a view
MAX_WRITTEN = 1 << 16  # attributes a split set on views that the child keeps (the oldest forgotten first)
PLAIN = (type(None), bool, int, float, str)

Step = list[Any]  # ["a", attribute name] or ["i", item key]


def path_key(root: str, steps: list[Step]) -> str:
    """A read path as a key (``self.cache_config.block_size``, ``request.prompt_token_ids[3]``): an attribute
    name holds neither ``.`` nor ``[``, an item's key is written as its ``repr``."""
    return root + "".join(_step_key(kind, key) for kind, key in steps)


def _step_key(kind: str, key: Any) -> str:
    """One step of :func:`path_key`: ``.name`` for an attribute, ``[repr]`` for an item."""
    return f".{key}" if kind == "a" else f"[{key!r}]"


SNAPSHOT_PATHS = [(root, [["a", n] for n in names]) for root, names in SNAPSHOT]


# ---------------------------------------------------------------- the deciding process's side


def encode(value: Any) -> dict[str, Any]:
    """How ``value`` crosses to the child (module docstring)."""
    plain = _plain(value, 3)
    if plain is not _NOT_PLAIN:
        return {"v": plain}
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {"enum": [cls.__module__, cls.__qualname__, value.name]}
    return {"obj": type(value).__name__}


_NOT_PLAIN = object()


def _plain(value: Any, depth: int) -> Any:
    if type(value) in PLAIN:
        return value
    if depth == 0:
        return _NOT_PLAIN
    if type(value) in (list, tuple) and len(value) <= MAX_ITEMS:
        items = [_plain(v, depth - 1) for v in value]
        return _NOT_PLAIN if any(i is _NOT_PLAIN for i in items) else items
    if type(value) is dict and len(value) <= MAX_ITEMS and all(type(k) is str for k in value):
        items = {k: _plain(v, depth - 1) for k, v in value.items()}
        return _NOT_PLAIN if any(i is _NOT_PLAIN for i in items.values()) else items
    return _NOT_PLAIN


def _follow(obj: Any, steps: list[Step]) -> Any:
    for kind, key in steps:
        if kind == "a" and isinstance(key, str) and not key.startswith("__"):
            obj = getattr(obj, key)
        elif kind == "i" and type(key) in (int, str):
            obj = obj[key]
        else:
            raise AttributeError(f"{key!r} is not readable from the sandbox")
    return obj


def _read(roots: dict[str, Any], root: str, steps: list[Step]) -> dict[str, Any]:
    try:
        return encode(_follow(roots[root], steps))
    except Exception as exc:  # noqa: BLE001 - what reading raised is what the split sees (an AttributeError)
        missing: dict[str, Any] = {"missing": f"{type(exc).__name__}: {exc}"[:300]}
        if isinstance(exc, AttributeError) and exc.name is not None and getattr(exc, "obj", None) is not None:
            missing["lacks"] = [exc.name, *owner_of(exc.obj)]  # so a checkout's reach for it is told apart
        return missing


_serials: dict[int, tuple[weakref.ref[Any], int]] = {}  # id(obj) -> (obj, while it lives; its serial)
_next_serial = itertools.count(1)


def identities(roots: dict[str, Any]) -> dict[str, int]:
    """A serial number per root object, the same for the object's whole life and never another's (by
    identity, whatever the object's own ``==`` says), but the object a replay's object stands for
    (:func:`assume_identities`)."""
    found = {}
    for name, obj in roots.items():
        held = _serials.get(id(obj))
        if held is not None and held[0]() is obj:
            found[name] = held[1]
            continue
        serial = found[name] = next(_next_serial)
        with contextlib.suppress(TypeError):  # not weakly referenceable (None in a test): nothing kept across calls
            _serials[id(obj)] = (weakref.ref(obj, functools.partial(_forget, id(obj))), serial)
    return found


def _forget(key: int, _: Any) -> None:
    _serials.pop(key, None)


def snapshot(roots: dict[str, Any]) -> dict[str, Any]:
    """What vLLM's split reads of ``roots`` (``self``, ``request``), sent with the call, one entry per path of
    :data:`SNAPSHOT`: under ``plain``, a value of :data:`PLAIN` by the key of the view it is an attribute of and
    its name (a view starts with them, ``View``); under ``paths``, any other as :func:`encode` gives it, by its
    path's key. A path whose reading raised is left out (the child asks for it, and meets the error there).
    Every call reads every path afresh: nothing of the scheduler is assumed constant between calls."""
    plain: dict[str, dict[str, Any]] = {view_key: {} for view_key in _SNAPSHOT_VIEWS}
    paths: dict[str, Any] = {}
    for root, read, view_key, name, key in _SNAPSHOT_READERS:
        try:
            value = read(roots[root])
            if type(value) in PLAIN:
                plain[view_key][name] = value
            else:
                paths[key] = encode(value)
        except Exception:  # noqa: BLE001, S112 - left out: the child asks, and meets the error there
            continue
    return {"plain": plain, "paths": paths}


# (root, what reads the path, the key of the view it is an attribute of, the attribute, the path's key)
_SNAPSHOT_READERS = [(root, operator.attrgetter(".".join(name for _, name in steps)), path_key(root, steps[:-1]),
                      steps[-1][1], path_key(root, steps)) for root, steps in SNAPSHOT_PATHS]
_SNAPSHOT_VIEWS = tuple(dict.fromkeys(view_key for _, _, view_key, _, _ in _SNAPSHOT_READERS))


def presented(roots: dict[str, Any]) -> str:
    """A digest of what a call presents on ``roots``: every path of :data:`SNAPSHOT` as :func:`snapshot` reads it
    (a path whose reading raised as :data:`_UNREADABLE`). An answer tape's entry holds the child's, and the
    deciding run uses the entry only where its own call's digest is the same."""
    values: list[Any] = []
    for root, read, _, _, _ in _SNAPSHOT_READERS:
        try:
            value = read(roots[root])
        except Exception:  # noqa: BLE001 - the child's run meets the same error, or the digests differ
            values.append(_UNREADABLE)
            continue
        values.append(value if type(value) in PLAIN else encode(value))
    return hashlib.blake2b(repr(values).encode(), digest_size=12).hexdigest()


_UNREADABLE = ("unreadable",)  # no read value is a tuple: plain values, and encode's dicts


class Lookup:
    """The answer to the child's ``{"get": [root, step...]}`` questions during one call on ``roots``, and
    ``lacked``: the ``(owner, attribute)`` pairs this process answered that an installed vLLM object lacks (its
    own record: only these can make the child's ``unfit`` answer a checkout unfit for the installed vLLM)."""

    def __init__(self, roots: dict[str, Any]):
        self.roots: dict[str, Any] = roots
        self.lacked: set[tuple[str, str]] = set()

    def __call__(self, question: Any) -> dict[str, Any]:
        try:
            root, *steps = question["get"]
            if root not in self.roots or not all(isinstance(s, list) and len(s) == 2 for s in steps):
                raise ValueError
        except (TypeError, KeyError, ValueError):
            return {"missing": "not a question the deciding process answers"}
        got = _read(self.roots, root, steps)
        if "lacks" in got:
            name, owner, _ = got["lacks"]
            self.lacked.add((owner, name))
        return got


def lookup(roots: dict[str, Any]) -> Lookup:
    return Lookup(roots)


# ---------------------------------------------------------------- the child's side


class Known:
    """What the child knows of the deciding process's objects during one call: ``plain``, the snapshot's plain
    values by the key of the view they are an attribute of (a view starts with them: ``View``), and ``paths``,
    every other value read so far (the snapshot's others, then what the child asked), by path key."""

    def __init__(self, sent: Any):
        plain, paths = sent["plain"], sent["paths"]
        if type(plain) is not dict or type(paths) is not dict or not all(type(v) is dict for v in plain.values()):
            raise ValueError("a snapshot that is not the deciding process's")
        self.plain: dict[str, dict[str, Any]] = plain
        self.paths: dict[str, Any] = paths


class Written:
    """What splits set on views (``{"local": value}``, or ``{"missing": why}`` for a delete), kept in the child by
    the object's serial, the view's key and the attribute's name, the oldest forgotten first."""

    def __init__(self) -> None:
        self.by_view: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
        self.order: OrderedDict[tuple[int, str, str], None] = OrderedDict()

    def under(self, serial: int, view_key: str) -> dict[str, dict[str, Any]]:
        """What was set on the attributes of the view ``view_key`` of object ``serial``, by attribute name."""
        return self.by_view.get((serial, view_key), {}) if self.by_view else {}

    def set(self, serial: int, view_key: str, name: str, got: dict[str, Any]) -> None:
        self.by_view.setdefault((serial, view_key), {})[name] = got
        self.order[(serial, view_key, name)] = None
        self.order.move_to_end((serial, view_key, name))
        while len(self.order) > MAX_WRITTEN:
            old_serial, old_view, old_name = self.order.popitem(last=False)[0]
            names = self.by_view[(old_serial, old_view)]
            del names[old_name]
            if not names:
                del self.by_view[(old_serial, old_view)]


class View:
    """A view of one of the deciding process's objects (module docstring): ``known`` is what the call knows,
    shared by every view of the call, ``written`` what splits set on the object (``serial``), ``key`` the view's
    own path as :func:`path_key` writes it.

    A view lives for one call, and within it a path is looked up at most once: a view starts with the snapshot's
    plain values of its attributes, and what splits set on them, in its ``__dict__`` (so reading them is Python's
    own attribute lookup: vLLM's split reads about twenty each call); any other attribute read keeps its value
    there too, an item read in ``__items``, and a write or delete changes both the kept value and ``written``."""

    # private: never a name vLLM's objects have
    __slots__ = ("__dict__", "__ask", "__call", "__at", "__items")

    def __init__(self, ask: Callable[[Any], Any], known: Known, written: Written, serial: int, root: str,
                 steps: list[Step], type_name: str, key: str):
        own = object.__setattr__  # this class's own __setattr__ is the split's write
        own(self, "_View__ask", ask)
        own(self, "_View__call", (known, written))
        own(self, "_View__at", (serial, root, steps, type_name, key))
        own(self, "_View__items", {})
        kept = self.__dict__
        kept.update(known.plain.get(key, ()))
        for name, got in written.under(serial, key).items():
            if "local" in got:
                kept[name] = got["local"]
            else:
                kept.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = self.__dict__[name] = self.__get(["a", name])
        return value

    def __getitem__(self, key: Any) -> Any:
        items = self.__items
        if key not in items:
            items[key] = self.__get(["i", key])
        return items[key]

    def __setattr__(self, name: str, value: Any) -> None:
        self.__call[1].set(self.__at[0], self.__at[4], name, {"local": value})
        self.__dict__[name] = value

    def __delattr__(self, name: str) -> None:
        self.__call[1].set(self.__at[0], self.__at[4], name, {"missing": f"{name} was deleted"})
        self.__dict__.pop(name, None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.__at[4]} cannot be called from the candidate's sandbox (a split reads "
                        f"attributes of the scheduler and the request, nothing else)")

    def __repr__(self) -> str:
        return f"<{self.__at[3]} {self.__at[4]} (a view from the candidate's sandbox)>"

    def __get(self, step: Step) -> Any:
        """What reading ``step`` of this view gives: what a split set, else what the call knows, else the deciding
        process's answer."""
        (known, written), (serial, root, steps, _, own_key) = self.__call, self.__at
        kind, name = step
        key = own_key + _step_key(kind, name)  # path_key, extended from the view's own
        got = (written.under(serial, own_key).get(name) if kind == "a" else None) or known.paths.get(key)
        if got is None:
            got = known.paths[key] = self.__ask({"get": [root, *steps, step]})
        return decode(got, lambda type_name: View(self.__ask, known, written, serial, root, [*steps, step], type_name,
                                                  key))


def decode(got: Any, view: Callable[[str], View]) -> Any:
    """A crossed value as the child uses it (``missing`` raises the AttributeError reading raised)."""
    if not isinstance(got, dict):
        raise AttributeError("the deciding process did not answer with a value")
    if "v" in got:
        return got["v"]
    if "local" in got:  # set by the split itself, in this call
        return got["local"]
    if "enum" in got:
        module, qualname, name = got["enum"]
        try:
            cls: Any = importlib.import_module(module)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            return cls[name]
        except (ImportError, AttributeError, KeyError):
            return view(f"{qualname}.{name}")
    if "obj" in got:
        return view(str(got["obj"]))
    error = AttributeError(str(got.get("missing", "unreadable")))
    lacks = got.get("lacks")
    if isinstance(lacks, list) and len(lacks) == 3 and all(isinstance(x, str | None) for x in lacks):
        error.name, owner, defined_in = lacks
        error.installed_owner = (owner, defined_in)  # type: ignore[attr-defined]
    raise error


def views(ask: Callable[[Any], Any], known: Known, ids: dict[str, int], written: Written) -> tuple[View, View]:
    """The scheduler and request a sandboxed split is called with."""
    return (View(ask, known, written, int(ids["self"]), "self", [], "Scheduler", "self"),
            View(ask, known, written, int(ids["request"]), "request", [], "Request", "request"))


transparent_to_checkouts(__file__)  # a checkout's split reads vLLM's objects through these views
