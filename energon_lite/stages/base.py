"""The Stage base class: the contract every pipeline stage follows.

A stage produces items one at a time from its parent(s) and can say where it is:

* ``next()`` returns the next item or raises ``StopIteration`` at the end of its stream;
* ``save_state()`` returns plain data: the stage's type name under ``"type"``, its own
  fields (exactly the names in ``STATE_KEYS``) and its parent's state under ``"source"``
  (``"sources"`` for several parents);
* ``restore_state(None)`` starts fresh, ``restore_state(state)`` continues exactly after the
  last item handed out when ``state`` was saved. There is no separate initialisation path;
* ``fetch(restore_key)`` returns the item with that ``__restore_key__`` again by random
  access, re-running this stage's deterministic work. Buffers use it on restore;
* ``key_of(item)``, asked right after ``next()`` returned ``item``, is its restore key, so a
  buffer above keeps the key beside the item: a hook's plain dict carries none of its own,
  and none is written into it. By default the key the item carries; a stage that makes
  items (``Encode``, ``Pack``) knows it, and one that passes items through asks its parent.

Constructors only store settings: no I/O, no epoch planning. A stage starts on
``restore_state`` (the loader always calls it) or, when nobody did, on its first
``next()``. States are only taken between two ``next()`` calls.

Subclasses implement ``next``, and, when they hold anything between items, ``_reset()``
(fresh start), ``_save() -> dict`` and ``_restore(state)``; the base class restores the
parents first and checks the state's shape (:func:`energon_lite.state.codec.check_level`);
``_validate(state)`` checks the stage's own fields before anything is restored.

A stage class also says what the rest of the library needs to know of it, so that nothing
outside ``stages/`` switches on stage class names: its row in ``loader.stats()``
(``STATS_LABEL``, ``STATS_HINT``, ``STATS_BATCHES``, ``STATS_HOOK``, ``stats_name()``,
``stats_held()``), what ``loader.mix()`` reads of it (``mix_tally``, ``MIX_COSTS``), the restore keys a saved level of it buffers (``held_keys``), what
``energon-lite checkpoint info`` says about a saved level (``describe_level``) and how an
elastic restore deals its state to another layout (``ELASTIC_FRESH``, ``elastic_state``,
``elastic_refusal``, ``delivered_base``). Every declaration has a default, so a stage declares only what
applies to it.

Registration: every subclass registers itself by class name (``__init_subclass__``), which is
the ``"type"`` of its saved levels; :func:`stage_class` finds the class of a saved level.
Reading a state needs no chain, so the registry completes itself on the first unknown
name: it imports every module of this package and, if the name is still unknown, every
flavor and kind plugin (through the dataset kind registry,
:func:`energon_lite.sources.kinds.registered_kinds`: a flavor's ``kind`` module imports the
flavor, and with it its stages). A user's own stage is registered once its module is
imported, as it is wherever its chain is built.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from energon_lite.errors import StateError, short_repr
from energon_lite.state.codec import check_level
from energon_lite.state.restore_key import RestoreKey, key_in
from energon_lite.task_encoder.chain_context import ChainContext

if TYPE_CHECKING:
    from energon_lite.stages.elastic_deal import ElasticDeal

# class name -> the stage classes of that name (more than one only by accident: see stage_class)
_CLASSES: dict[str, list[type[Stage]]] = {}


class Stage:
    """Base class of all stages. Subclasses set ``source`` (or ``sources``) and override."""

    STATE_KEYS: ClassVar[tuple[str, ...]] = ()  # the stage's own state fields
    # fields a state may carry but need not (an elastic restore's leftover work)
    OPTIONAL_KEYS: ClassVar[tuple[str, ...]] = ()
    source: Stage | None = None
    sources: list[Any] | None = None  # stages with several parents
    _started: bool = False
    _context: ChainContext | None = None  # the chain's, given by bind()

    # what the library asks of a stage class (module docstring); every one has a default --

    # loader.stats(): what the stage does, as a user names it ("shuffle"): "shuffle (ShuffleBuffer)"
    STATS_LABEL: ClassVar[str | None] = None
    # what to try when this stage is the bottleneck; ``{percent}`` (its share of worker time)
    # and ``{more_workers}`` (the advice on num_workers) are filled in
    STATS_HINT: ClassVar[str | None] = None
    # it forms the batches: the samples delivered are what entered it less what it holds
    STATS_BATCHES: ClassVar[bool] = False
    # the attribute holding a user's hook the stage calls per item, timed as a row of its own
    STATS_HOOK: ClassVar[str | None] = None
    # the own fields of this stage starting over on another layout (elastic restore)
    ELASTIC_FRESH: ClassVar[Mapping[str, Any] | None] = None
    # loader.mix(): it reports sample costs to the blend (samples held above it are costed)
    MIX_COSTS: ClassVar[bool] = False
    # a saved level's "sources" may hold None (that parent starts fresh; ``Phases``), and its
    # parents' states travel from a worker as what changed (resume/state_delta.py)
    LAZY_SOURCES: ClassVar[bool] = False
    # own state keys whose value may be a long list or a dict (a buffer's keys): a worker
    # sends them as what changed since its last batch (resume/state_delta.py)
    DELTA_KEYS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        where = (cls.__module__, cls.__qualname__)
        # the same class defined again (a module reloaded, a script rerun) replaces itself
        others = [
            c for c in _CLASSES.get(cls.__name__, []) if (c.__module__, c.__qualname__) != where
        ]
        _CLASSES[cls.__name__] = [*others, cls]

    def stats_name(self) -> str:
        """This stage's row in ``loader.stats()`` when the chain has several of its class."""
        return type(self).__name__

    def stats_held(self) -> tuple[int, int | None] | None:
        """(items it holds now, its capacity or None) for ``loader.stats()``, taken between
        items; None for a stage that holds none (or has not started). Default: None."""
        return None

    @classmethod
    def held_keys(cls, level: dict[str, Any]) -> list[Any]:
        """The plain restore keys of the items a saved level of this stage holds in its
        buffers (an elastic restore deals them to the new workers). Default: none."""
        return []

    @classmethod
    def mix_tally(cls, level: dict[str, Any]) -> tuple[list[list[float]], int] | None:
        """``loader.mix()``: a blend's ``[drawn, costed, cost]`` per source in a saved level
        and the steps delivered before its layout started; None for a stage that does not
        blend (the default)."""
        return None

    @classmethod
    def delivered_base(cls, level: dict[str, Any]) -> int:
        """The training steps delivered before the layout of a saved level started (a
        weighted blend's schedule counts them; an elastic restore carries them on).
        Default: 0."""
        return 0

    @classmethod
    def describe_level(cls, level: dict[str, Any]) -> list[str]:
        """What ``energon-lite checkpoint info`` says about a saved level besides its
        buffered samples. Default: nothing."""
        return []

    @classmethod
    def elastic_refusal(cls, level: dict[str, Any]) -> str | None:
        """Why a saved level cannot move to another layout, or None when it can."""
        return None

    @classmethod
    def elastic_state(cls, level: dict[str, Any], deal: ElasticDeal) -> dict[str, Any]:
        """This stage's own fields on another layout, from one old worker's saved ``level``
        (the new chain has the same stages) and what ``deal`` hands the new worker.

        Default: ``ELASTIC_FRESH`` when declared; a stage without state fields starts with
        none; a stage with state that declares nothing is refused, naming it."""
        if cls.ELASTIC_FRESH is not None:
            return copy.deepcopy(dict(cls.ELASTIC_FRESH))
        if not cls.STATE_KEYS:
            return {}
        raise StateError(
            f"elastic restore does not know how to redistribute stage {cls.__name__!r}"
        )

    def next(self) -> Any:
        raise NotImplementedError

    def key_of(self, item: Any) -> RestoreKey | None:
        """The restore key of ``item``, which ``next()`` has just returned (module
        docstring); None when nobody knows it. Default: the key the item carries."""
        return key_in(item)

    # the chain's context -------------------------------------------------------------------

    @property
    def context(self) -> ChainContext:
        """What this stage's chain shares (``task_encoder/chain_context.py``): given by
        :meth:`bind` when the chain is built; a stage nobody bound (a chain composed by hand)
        makes one on first use, for itself and its parents."""
        if self._context is None:
            self.bind(ChainContext())
        assert self._context is not None
        return self._context

    def bind(self, context: ChainContext) -> None:
        """This stage and every stage below it share ``context``."""
        pending: list[Stage] = [self]
        while pending:
            stage = pending.pop()
            stage._context = context
            pending.extend(stage._parents())

    # state --------------------------------------------------------------------------------

    def save_state(self) -> dict[str, Any]:
        self._start_if_fresh()  # a stage nobody started is at its fresh start
        state: dict[str, Any] = {"type": type(self).__name__, **self._save()}
        if self.source is not None:
            state["source"] = self.source.save_state()
        elif self.sources is not None:
            state["sources"] = [source.save_state() for source in self.sources]
        return state

    def restore_state(self, state: dict[str, Any] | None) -> None:
        # bound before the parents restore (the chain shares one context), and running while
        # it restores: a hook made again (a buffer refetching its keys) reads its indices
        with self.context.running():
            self._restore_level(state)

    def _restore_level(self, state: dict[str, Any] | None) -> None:
        if state is None:
            for parent in self._parents():
                parent.restore_state(None)
            self._reset()
        else:
            check_level(
                type(self).__name__, self.STATE_KEYS, self._parent_key(), state, self.OPTIONAL_KEYS
            )
            self._validate(state)
            if self.source is not None:
                self.source.restore_state(state["source"])
            elif self.sources is not None:
                self._restore_sources(state["sources"])
            self._restore(state)
        self._started = True

    def _start_if_fresh(self) -> None:
        """Start fresh if nobody restored this stage yet (call at the top of ``next``)."""
        if not self._started:
            self.restore_state(None)

    # hooks for subclasses ------------------------------------------------------------------

    def _reset(self) -> None:
        """Start fresh (parents are already reset). Default: nothing held."""

    def _save(self) -> dict[str, Any]:
        """This stage's own fields, exactly ``STATE_KEYS``, in containers that are never changed
        afterwards: a new list for one that changes (the trainer keeps saved states, and a
        worker sends a list as the slots holding other objects than the list it sent before;
        resume/state_delta.py). Default: none."""
        return {}

    def _validate(self, state: dict[str, Any]) -> None:
        """Check this stage's own fields before anything is restored (no I/O). Default: none."""

    def _restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (shape checked, parents restored). Default: nothing held."""

    def fetch(self, restore_key: Any) -> Any:
        """Default: the stage does not change items, so its parent can fetch them."""
        if self.source is None:
            raise NotImplementedError(f"{type(self).__name__} cannot fetch by restore key")
        return self.source.fetch(restore_key)

    def __iter__(self) -> Iterator[Any]:
        while True:
            try:
                with self.context.running():  # its hooks read this chain's indices
                    item = self.next()
            except StopIteration:
                return
            yield item

    # helpers ---------------------------------------------------------------------------------

    def _parents(self) -> list[Stage]:
        if self.source is not None:
            return [self.source]
        return list(self.sources or [])

    def _parent_key(self) -> str | None:
        if self.source is not None:
            return "source"
        return "sources" if self.sources is not None else None

    def _restore_sources(self, states: list[Any]) -> None:
        assert self.sources is not None
        if len(states) != len(self.sources):
            raise StateError(
                f"{type(self).__name__}: state has {len(states)} sources, this stage has "
                f"{len(self.sources)}; was it saved with another metadataset?"
            )
        for source, source_state in zip(self.sources, states):
            source.restore_state(source_state)


def stage_class(name: Any) -> type[Stage] | None:
    """The stage class whose saved levels have ``"type": name``; None when none is known.

    Completes the registry on the first unknown name (see the module docstring): this
    package's stages first, the flavors' only if the name is still unknown. Two different
    classes of the same name make their levels unreadable: StateError, naming both.
    """
    if not isinstance(name, str):
        return None
    for load in _LOADS:
        if name in _CLASSES:
            break
        if load not in _loaded:
            _loaded.add(load)
            load()
    found = _CLASSES.get(name, [])
    if len(found) > 1:
        where = ", ".join(f"{c.__module__}.{c.__qualname__}" for c in found)
        raise StateError(
            f"a state names stage {short_repr(name)}, and {len(found)} stage classes have that "
            f"name ({where}); give your stage a name of its own"
        )
    return found[0] if found else None


def _import_stages() -> None:
    """Import every module of this package (each stage registers itself)."""
    package = importlib.import_module(__package__ or "energon_lite.stages")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def _import_flavors() -> None:
    """Import every flavor and kind plugin, and with them their stages."""
    from energon_lite.sources.kinds import FLAVORS_PACKAGE, registered_kinds

    registered_kinds()
    # a flavor package exports its names on first use (its stages with them): ask for each
    for name, module in list(sys.modules.items()):
        if name.startswith(f"{FLAVORS_PACKAGE}.") and hasattr(module, "__path__"):
            for exported in getattr(module, "__all__", ()):
                try:
                    getattr(module, exported)
                except ImportError:  # a missing extra: that flavor's states cannot be read
                    continue


_LOADS: tuple[Callable[[], None], ...] = (_import_stages, _import_flavors)
_loaded: set[Callable[[], None]] = set()
