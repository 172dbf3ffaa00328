"""Checkpoints of every iterative fit, kept by the one driver (:mod:`daskrnmf._driver`).

A model with the parameter ``checkpoint`` (a directory or an fsspec URL) is fitted as
usual; after every iteration of its driver runs the driver saves the run's state to that
directory, and ``fit(X, resume=True)`` continues from the last one saved.  The saved
state is the driver's ``state`` and the attributes the model's problem object lists in
``checkpoint_attributes`` (its per-block state among them); nothing of the fit's other
work is saved:

* A resumed fit runs the model's ``_fit_blocks`` again from the start.  Its work outside
  the driver's runs (the first pass, seeding, screening on the in-memory sample, the
  final pass) is deterministic given X and the seed, and is done again; each driver run
  (counted in the order the fit makes them; an inner ``quiet`` run is deterministic and
  not counted) is taken from the checkpoint where it was saved: a run that had ended
  returns its final state at once, the run that was stopped continues from its last
  saved iteration.  The result is the uninterrupted fit's, exactly: every fitted
  attribute, ``n_iter_``, the objective history and ``n_passes_`` (the whole fit's
  passes, as if it had not been stopped).
* Per-block state (the codes H of the multiplicative-update models, the labels of the
  last pass, the outliers of RobustNMF: :class:`daskrnmf._blocks.BlockState`) is never
  gathered: each block's state is written by the task that holds it, as a Zarr group of
  its own (``blocks/<name>/b000017``) inside the checkpoint's generation, chunked like
  X; the directory must be visible to every worker (a shared file system or an object
  store), which is checked after each save.
* What is saved is fingerprinted: the model, its parameters (all but ``max_iter``,
  ``verbose``, ``callback``, ``prefetch`` (how far a stream reads ahead) and the
  checkpoint's own, which may change between the two fits; arrays by their SHA-256), the seed, X's shape, dtype, row chunking and sampled
  rows (checked before any pass), the SHA-256 of every block of X (computed where it is
  read, in the first pass of a checkpointed fit) with the first pass's statistics, and a
  classifier's labels.  A stream without that first pass (ONMFO) adds its batch layout
  (:meth:`FitCheckpoint.add_fingerprint`) and saves the SHA-256 of the blocks it has read
  among its ``checkpoint_attributes``: a resumed run checks each block as it reads it
  again; its batches are fixed by rows, so X may be chunked otherwise (with a
  ``batch_size``, X's chunks cut a batch into pieces whose sums are then added in
  another order: the result equals the uninterrupted one to rounding, not bit for bit;
  and a block is checked only when read under the same row range as before, so rows
  read before are not checked again on X chunked otherwise: a strict xfail in
  tests/test_review_onmfo.py).  Resuming with other data, labels or parameters, or
  from damaged files (every array has its SHA-256), is a ValueError naming what
  differs.

The directory itself, its atomic generations, lock and claim rules are those of
:mod:`daskrnmf._checkpoint`.
"""

import copy
import dataclasses
import hashlib
import json
import os

import numpy as np

from . import _checkpoint
from ._blocks import BlockState
from ._stores import digest, is_url

# parameters that may differ between a fit and its resumption (none decides the result:
# ONMFO's prefetch is how far it reads ahead, as its own checkpoint left it free)
UNFINGERPRINTED = frozenset({"max_iter", "verbose", "callback", "checkpoint",
                             "checkpoint_every", "prefetch"})
BLOCKS = "blocks"


# ---------------------------------------------------------------- state as arrays
def flatten(obj, key, arrays, blocks=None):
    """The JSON skeleton of ``obj``; its arrays go into ``arrays`` (name -> ndarray) and
    its per-block states into ``blocks`` (name -> :class:`BlockState`).

    ``obj`` is made of NumPy arrays and scalars, Python scalars, None, dicts with string
    keys, lists, tuples, per-block states and (``blocks`` given: on the client) objects
    whose type the restoring side's template has (dataclasses and plain objects).
    """
    if obj is None:
        return {"t": "none"}
    if isinstance(obj, BlockState):
        if blocks is None:
            raise TypeError("per-block state inside a block's state")
        blocks[key] = obj
        return {"t": "blocks", "k": key, "n": len(obj)}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise TypeError(f"cannot checkpoint an array of dtype {obj.dtype}")
        arrays[key] = obj
        # a 0-d array is stored as shape (1,) (np.ascontiguousarray): its shape is kept
        return {"t": "nd", "k": key, **({"0d": True} if obj.ndim == 0 else {})}
    if isinstance(obj, np.generic):
        arrays[key] = np.asarray(obj)
        return {"t": "np", "k": key}
    if isinstance(obj, float):
        return {"t": "float", "v": repr(obj)}   # exact, inf and NaN included
    if isinstance(obj, (bool, int, str)):
        return {"t": "py", "v": obj}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError("cannot checkpoint a dict with keys that are not strings")
        return {"t": "dict", "keys": list(obj),
                "items": [flatten(v, f"{key}.{i}", arrays, blocks)
                          for i, v in enumerate(obj.values())]}
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return {"t": type(obj).__name__,
                "items": [flatten(v, f"{key}.{i}", arrays, blocks) for i, v in enumerate(obj)]}
    if blocks is not None and (dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__")):
        names = ([f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj)
                 else sorted(vars(obj)))
        return {"t": "obj", "type": _type_name(obj), "keys": names,
                "items": [flatten(getattr(obj, n), f"{key}.{i}", arrays, blocks)
                          for i, n in enumerate(names)]}
    raise TypeError(f"cannot checkpoint a {type(obj).__name__}")


def unflatten(skel, arrays, template=None, blocks=None):
    """``obj`` back from :func:`flatten`'s skeleton: objects are rebuilt from
    ``template`` (the fresh fit's value at the same place, of the same type), per-block
    states by ``blocks(name, n)``.  A ValueError when the skeleton does not fit."""
    kind = skel.get("t") if isinstance(skel, dict) else None
    if kind == "none":
        return None
    if kind == "blocks":
        return blocks(skel["k"], int(skel["n"]))
    if kind == "nd":
        value = np.array(arrays[skel["k"]])         # writable, owned
        return value.reshape(()) if skel.get("0d") else value
    if kind == "np":
        return arrays[skel["k"]].reshape(())[()]
    if kind == "float":
        return float(skel["v"])
    if kind == "py":
        return skel["v"]
    if kind in ("dict", "list", "tuple", "obj"):
        items = skel["items"]
        if kind == "dict" or kind == "obj":
            keys = skel["keys"]
            sub = [(template.get(k) if isinstance(template, dict) else
                    getattr(template, k, None)) for k in keys]
        else:
            sub = (list(template) if isinstance(template, (list, tuple))
                   and len(template) == len(items) else [None] * len(items))
        values = [unflatten(s, arrays, t, blocks) for s, t in zip(items, sub)]
        if kind == "dict":
            return dict(zip(keys, values))
        if kind == "list":
            return values
        if kind == "tuple":
            return tuple(values)
        if template is None or _type_name(template) != skel["type"]:
            raise ValueError(f"a saved {skel['type']} has no counterpart in this fit")
        obj = copy.copy(template)
        for k, value in zip(keys, values):
            if dataclasses.is_dataclass(obj) and getattr(type(obj), "__dataclass_params__",
                                                         None) and type(obj).__dataclass_params__.frozen:
                object.__setattr__(obj, k, value)
            else:
                setattr(obj, k, value)
        return obj
    raise ValueError(f"unknown entry {str(skel)[:60]!r}")


def _type_name(obj):
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


# ---------------------------------------------------------------- per-block state
def write_block(content, where, storage_options=None):
    """Write one block's state as the Zarr group ``where`` (on the worker that holds
    it); returns the SHA-256 of its skeleton and arrays, which :func:`read_block`
    checks."""
    import zarr

    from .io import zarr_target

    arrays = {}
    skel = flatten(content, "a", arrays)
    group = zarr.open_group(zarr_target(where, storage_options, read_only=False), mode="w")
    sums = _checkpoint.write_arrays(group, arrays)
    group.attrs.update({"skeleton": skel, "_sha256": sums})
    return _block_digest(skel, sums)


def _block_digest(skel, sums):
    return hashlib.sha256(json.dumps([skel, sums], sort_keys=True).encode()).hexdigest()


def read_block(where, expected, storage_options=None):
    """One block's state from :func:`write_block`'s group; a ValueError naming it when
    it is missing or differs from what was saved."""
    import zarr

    from .io import zarr_target

    try:
        group = zarr.open_group(zarr_target(where, storage_options, read_only=True), mode="r",
                                zarr_format=3)      # as written: never a v2 pickle codec
        attrs = dict(group.attrs)
        skel, sums = attrs["skeleton"], attrs["_sha256"]
        arrays = {name: np.asarray(group[name][...]) for name in sums}
    except Exception as exc:
        raise ValueError(f"The checkpoint's block state {where} is damaged: cannot read it "
                         f"({type(exc).__name__}: {exc}).") from None
    if (_block_digest(skel, sums) != expected
            or any(digest(a) != sums[name] for name, a in arrays.items())):
        raise ValueError(f"The checkpoint's block state {where} is damaged: its content "
                         "differs from what was saved.")
    return unflatten(skel, arrays)


def _join(where, *names):
    return "/".join([where.rstrip("/"), *names]) if is_url(where) else os.path.join(where, *names)


# ---------------------------------------------------------------- one fit's checkpoint
class FitCheckpoint:
    """The checkpoint of one fit: the fingerprint, what was saved, and the runs.

    Made by :meth:`daskrnmf._base.BaseModel._fit_once` (which holds the directory's lock
    and claim); the driver takes :meth:`next_run` for each run it makes.
    """

    def __init__(self, path, key, data, saved=None, storage_options=None, blocks=None,
                 chunked=True):
        self.path = path
        self.chunked = chunked          # the saved state follows X's row chunks
        self.key = key
        self.data = data
        self.options = storage_options
        self.row_blocks = blocks        # the fit's RowBlocks (set once made)
        self.saved = saved              # (arrays, attrs) of the generation resumed, or None
        self.runs = []                  # one entry per run so far: (skeleton, arrays, blocks, info)
        self.saved_once = False         # this fit wrote a generation
        # a stream's step found X's values bad (a ValueError while streaming, set by the
        # model): a fresh run's checkpoint is removed even after a save
        self.bad_data = False

    # -- what was saved
    def _refuse(self, what):
        where = self.saved[1]["_file"]
        raise ValueError(f"The checkpoint {where} is of another fit: {what}. Resume with the "
                         "X and parameters it was made with, or fit with "
                         "overwrite_checkpoint=True to start afresh.")

    def check_early(self):
        """Before any pass over X: the saved run is of this model, these parameters (the
        fixed seed among them), X's shape, dtype, row chunking and sampled rows."""
        if self.saved is None:
            return
        attrs = self.saved[1]
        old = attrs.get("fingerprint", {})
        if not isinstance(old, dict):
            self._refuse("it holds no fingerprint")
        if "params" not in old or "runs" not in attrs:
            # ONMFO's own checkpoints before the driver kept every model's
            raise ValueError(f"The checkpoint {attrs['_file']} is of an older format (written "
                             "by an earlier version of daskrnmf) and cannot be resumed; fit "
                             "with overwrite_checkpoint=True to start afresh.")
        if old.get("model") != self.key["model"]:
            self._refuse(f"it is of {old.get('model')!r}, not {self.key['model']!r}")
        params, mine = old.get("params", {}) or {}, self.key["params"]
        differ = sorted(n for n in set(params) | set(mine) if params.get(n) != mine.get(n))
        if differ:
            self._refuse(", ".join(f"{n}={_short(params.get(n))} there, "
                                   f"{_short(mine.get(n))} here" for n in differ))
        if self.key["fixed_seed"] != bool(old.get("fixed_seed")):
            self._refuse("random_state was " + ("an int" if old.get("fixed_seed") else
                                                "not an int") + " there")
        _checkpoint.check_same_data(attrs.get("data", {}), self.data, attrs["_file"])
        if self.chunked and attrs.get("data", {}).get("row_chunks") != self.data["row_chunks"]:
            self._refuse("X was chunked otherwise (the per-block state and the order of "
                         "the sums follow X's row chunks); resume with X chunked as it was")

    def start(self, seed, stats, y=None):
        """After the first pass: the fit's seed (the saved run's, when resuming a fit
        whose ``random_state`` is not an int), and the check that the saved run is of
        this seed, of X's values (the first pass's statistics and the SHA-256 of every
        block) and of these labels ``y``."""
        if self.saved is not None and not self.key["fixed_seed"]:
            try:
                seed = int(self.saved[1]["seed"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"The checkpoint {self.saved[1]['_file']} is damaged: "
                                 "it holds no seed.") from None
        self.key = {**self.key, "seed": str(seed), "stats": stats_digest(stats),
                    "y": labels_digest(y)}
        if self.saved is None:
            return seed
        old = self.saved[1].get("fingerprint", {})
        if old.get("seed") != self.key["seed"]:
            self._refuse(f"its seed is {old.get('seed')}, this fit's {self.key['seed']}")
        if old.get("stats") != self.key["stats"]:
            self._refuse("X's values differ from those it was made from (the SHA-256 of "
                         "its blocks, read in the first pass)")
        if old.get("y") != self.key["y"]:
            self._refuse("the labels y differ from those it was made with")
        return seed

    def add_fingerprint(self, **values):
        """What else decides the saved state besides the model, its parameters, the seed
        and X (e.g. a stream's batch layout, known once the fit has made it): added to
        the fingerprint; a saved run whose values differ is refused, naming them."""
        self.key = {**self.key, **values}
        if self.saved is None:
            return
        old = self.saved[1].get("fingerprint", {})
        differ = sorted(n for n in values if old.get(n) != values[n])
        if differ:
            self._refuse(", ".join(f"{n} {_short(old.get(n))} there, {_short(values[n])} here"
                                   for n in differ))

    def saved_run(self, index):
        """``(skeleton, info)`` of run ``index`` in the checkpoint, or None."""
        if self.saved is None:
            return None
        runs = self.saved[1].get("runs", [])
        return runs[index] if index < len(runs) else None

    def next_run(self, name):
        """The :class:`RunCheckpoint` of the fit's next driver run."""
        return RunCheckpoint(self, len(self.runs), name)

    # -- saving
    def save(self):
        arrays, attrs_runs, block_sets = {}, [], {}
        for entry in self.runs:
            if entry is None:           # a run that has not finished an iteration yet
                break
            skel, run_arrays, run_blocks, info = entry
            arrays.update(run_arrays)
            block_sets.update(run_blocks)
            attrs_runs.append({**info, "skeleton": skel})
        attrs = {"fingerprint": self.key, "data": self.data, "seed": self.key["seed"],
                 "runs": attrs_runs}

        def write_blocks(where):
            return {"block_sha256": _write_block_sets(where, block_sets, self.options)}

        # the generation resumed from stays until the fit ends: restored per-block
        # state is read from it until a pass has consumed it
        keep = () if self.saved is None else (_generation_name(self.saved[1]["_file"]),)
        _checkpoint.save(self.path, arrays, attrs, self.options, extra=write_blocks,
                         keep=keep)
        self.saved_once = True

    def close(self):
        """The fit ended: the generation resumed from is no longer needed."""
        if self.saved is not None:
            _checkpoint.prune(self.path, self.options)

    def load_blocks(self, name, n):
        """Tasks (Dask input) or arrays (NumPy input) of the saved per-block state
        ``name``."""
        attrs = self.saved[1]
        sums = attrs.get("block_sha256", {}).get(name)
        if not isinstance(sums, list) or len(sums) != n:
            raise ValueError(f"The checkpoint {attrs['_file']} is damaged: the per-block "
                             f"state {name!r} is not listed for {n} blocks.")
        if self.row_blocks is not None and self.row_blocks.n_blocks != n:
            raise ValueError(f"The checkpoint {attrs['_file']} holds {n} blocks of state, "
                             f"X has {self.row_blocks.n_blocks}: resume with X chunked as "
                             "it was.")
        paths = [_join(attrs["_file"], BLOCKS, name, f"b{b:06d}") for b in range(n)]
        if self.row_blocks is not None and self.row_blocks.is_dask:
            from dask import delayed

            read = delayed(read_block, pure=True)
            return BlockState(read(p, s, self.options) for p, s in zip(paths, sums))
        return BlockState(read_block(p, s, self.options) for p, s in zip(paths, sums))


def _generation_name(where):
    return where.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]


def _short(value):
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _write_block_sets(where, block_sets, options):
    """Every per-block state of ``block_sets`` written into the generation ``where``,
    each block by the task that holds it; their digests, per name."""
    if not block_sets:
        return {}
    import zarr

    from .io import zarr_target

    zarr.open_group(zarr_target(_join(where, BLOCKS), options, read_only=False), mode="w")
    jobs = {}
    for name, states in block_sets.items():
        zarr.open_group(zarr_target(_join(where, BLOCKS, name), options, read_only=False),
                        mode="w")
        jobs[name] = [(st, _join(where, BLOCKS, name, f"b{b:06d}"))
                      for b, st in enumerate(states)]
    lazy = any(hasattr(st, "dask") or hasattr(st, "__dask_graph__")
               for states in block_sets.values() for st in states)
    if lazy:
        import dask
        from dask import delayed

        write = delayed(write_block, pure=False)
        flat = [(name, write(st, p, options)) for name, pairs in jobs.items()
                for st, p in pairs]
        done = dask.compute(*[t for _, t in flat])
        sums = {name: [] for name in jobs}
        for (name, _), s in zip(flat, done):
            sums[name].append(s)
    else:
        sums = {name: [write_block(st, p, options) for st, p in pairs]
                for name, pairs in jobs.items()}
    if not is_url(where):
        # the workers wrote where the client reads: a directory local to each worker
        # host would leave a checkpoint that cannot be resumed
        missing = [p for pairs in jobs.values() for _, p in pairs
                   if not os.path.exists(os.path.join(p, "zarr.json"))]
        if missing:
            raise RuntimeError(f"The workers wrote the checkpoint's block state where this "
                               f"process cannot read it ({missing[0]} is missing here): the "
                               "checkpoint directory must be on a file system every worker "
                               "and this process share.")
    return sums


def stats_digest(stats):
    """A digest of the first pass's per-feature statistics (every value of X counts)."""
    if not stats:
        return None
    h = hashlib.sha256()
    for name in ("n", "sum", "min", "max", "nan", "observed"):
        if name in stats:
            h.update(name.encode())
            h.update(np.ascontiguousarray(np.asarray(stats[name], dtype=np.float64)).tobytes())
    for block in stats.get("sha256", ()):     # every value, in order
        h.update(block.encode())
    return h.hexdigest()[:32]


def labels_digest(y):
    """A digest of the labels ``y`` (NumPy, or Dask: digested where its blocks are), or
    None without labels."""
    if y is None:
        return None
    if hasattr(y, "to_delayed"):
        import dask

        parts = dask.compute(*[dask.delayed(_labels_sha, pure=True)(b)
                               for b in y.to_delayed().ravel()])
    else:
        parts = [_labels_sha(y)]
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:32]


def _labels_sha(y):
    y = np.asarray(y)
    if y.dtype.kind in "biuf":
        return digest(np.ascontiguousarray(y))
    return hashlib.sha256("\x1f".join(map(repr, y.tolist())).encode()).hexdigest()


def model_fingerprint(model):
    """What decides a fit's result besides X and the seed: the model and its parameters
    (see :data:`UNFINGERPRINTED`)."""
    import numbers

    return {"model": type(model).__name__, "params": param_fingerprint(model),
            "fixed_seed": isinstance(model.random_state, numbers.Integral), "seed": None}


def param_fingerprint(model):
    """The parameters that decide a fit's result, as JSON (arrays, also inside tuples
    and lists, by their SHA-256)."""
    return {name: _param_value(value)
            for name, value in sorted(model.get_params(deep=False).items())
            if name not in UNFINGERPRINTED and name != "random_state"}


def _param_value(value):
    if isinstance(value, (list, tuple)):
        return [_param_value(v) for v in value]
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        arr = np.ascontiguousarray(np.asarray(value))
        return f"array{arr.shape}:{arr.dtype}:{digest(arr)[:32]}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


class RunCheckpoint:
    """One driver run's part of the fit's checkpoint."""

    def __init__(self, fit, index, name):
        self.fit = fit
        self.index = index
        self.name = name
        rb = fit.row_blocks
        # the passes made before the run: a run restored adds its own passes to the
        # resumed fit's count (an earlier run may have made more, with a larger max_iter)
        self.passes_at_start = None if rb is None else [int(rb.n_passes),
                                                        int(rb.n_state_passes)]
        fit.runs.append(None)

    def restore(self, state, problem):
        """``(state, history, n_iter, converged, stopped, iteration, pass_began)`` of
        this run as saved, with ``problem``'s listed attributes set (a property may check the value
        it is given); None when the checkpoint has no such run (it starts afresh).  A
        ``problem`` with a method ``check_restored(state)`` checks the state restored
        (shapes, finiteness, a position that exists): its ValueError names the damage."""
        saved = self.fit.saved_run(self.index)
        if saved is None:
            return None
        where = self.fit.saved[1]["_file"]
        prefix = f"r{self.index}."
        restored = {}

        def load_blocks(name, n):
            restored[name] = self.fit.load_blocks(name, n)
            return restored[name]

        try:
            if saved.get("name") != self.name:
                raise ValueError(f"run {self.index} is {saved.get('name')!r}, this fit's "
                                 f"is {self.name!r}")
            arrays = self.fit.saved[0]
            skel = saved["skeleton"]
            template = {"state": state, "problem": _problem_attrs(problem)}
            value = unflatten(skel, arrays, template, load_blocks)
            history = arrays[f"{prefix}history"]
            info = (value["state"], history, np.array(saved["n_iter"], dtype=int),
                    np.array(saved["converged"], dtype=bool), bool(saved["stopped"]),
                    int(saved["iteration"]),
                    # a stream's pass start (before it was saved: the resumed iteration)
                    int(saved.get("pass_began", saved["iteration"])))
            for attr, val in (value["problem"] or {}).items():
                if attr in problem.checkpoint_attributes:   # never another attribute
                    setattr(problem, attr, val)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"The checkpoint {where} is damaged or of another fit: "
                             f"{exc}.") from None
        check = getattr(problem, "check_restored", None)
        if check is not None:
            try:
                check(info[0])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"The checkpoint {where} is damaged: {exc}") from None
        blocks = self.fit.row_blocks
        if blocks is not None and saved.get("n_passes") is not None:
            before = saved.get("passes_at_start") or [blocks.n_passes, blocks.n_state_passes]
            blocks.n_passes += int(saved["n_passes"]) - int(before[0])
            blocks.n_state_passes += int(saved.get("n_state_passes") or 0) - int(before[1])
        # what the next save writes of this run until the run saves again
        run_info = {k: v for k, v in saved.items() if k != "skeleton"}
        self.fit.runs[self.index] = (skel, {k: a for k, a in self.fit.saved[0].items()
                                            if k.startswith(prefix)}, restored, run_info)
        return info

    def save(self, state, problem, log, iteration):
        """Record the run after ``iteration`` and write the checkpoint."""
        arrays, blocks = {}, {}
        prefix = f"r{self.index}"
        skel = flatten({"state": state, "problem": _problem_attrs(problem)}, prefix, arrays,
                       blocks)
        arrays[f"{prefix}.history"] = np.array(log.history, dtype=np.float64).reshape(
            len(log.history), -1)
        rb = self.fit.row_blocks
        info = {"name": self.name, "iteration": int(iteration),
                "n_iter": log.n_iter.tolist(), "converged": log.converged.tolist(),
                "stopped": bool(log.stopped_by_callback), "pass_began": int(log.pass_began),
                "n_passes": None if rb is None else int(rb.n_passes),
                "n_state_passes": None if rb is None else int(rb.n_state_passes),
                "passes_at_start": self.passes_at_start}
        self.fit.runs[self.index] = (skel, arrays, blocks, info)
        self.fit.save()


def _problem_attrs(problem):
    if problem is None:
        return None
    return {name: getattr(problem, name) for name in problem.checkpoint_attributes}
