"""Cached biLM features: a data set is embedded once (every layer, every token) and task heads train from disk.

The biLM is frozen, so its outputs for a data set never change; on a CPU running it is most of the cost of an
experiment. One HDF5 file per (model, sentences) pair holds ``vectors`` (N_tokens, L+1, D) in float16 and
``offsets`` (S+1,), sentence i being rows offsets[i]:offsets[i+1]. The file name is a hash of the model (its config
and ``weights_sha256``) and the token lists, so a changed data set or model never reads a stale cache.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Sequence

import h5py
import numpy as np
from tqdm.auto import tqdm

from elmo.embed import Embedder
from elmo.errors import UsageError
from elmo.io.atomic import atomic_path, remove_stale_temporaries
from elmo.io.download import cache_dir
from elmo.model.fingerprint import weights_sha256

FEATURES_VERSION = "1"  # bump when the way features are computed changes: old caches are then not reused


class FeatureCache:
    """Read access to a cache file: ``cache[i]`` is sentence i's (n_i, L+1, D) float32 array."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        damaged = f"{self.path}: a damaged feature cache ({{}}); delete it and run again to rebuild it"
        try:
            with h5py.File(self.path, "r") as f:
                offsets, vectors = f["offsets"], f["vectors"]
                if not _sizes_fit(offsets, vectors):  # before reading: a 2 kB file can claim 89 GiB of vectors
                    raise UsageError(damaged.format("its datasets' sizes do not match what the file holds"))
                self.offsets = offsets[()]  # (S+1,)
                self.vectors = vectors[()]  # (N, L+1, D) float16, held in memory: ~1.5 kB per token
        except (OSError, KeyError, ValueError, TypeError) as err:
            raise UsageError(damaged.format(str(err).split("(")[0].strip() or type(err).__name__)) from None
        offsets = self.offsets
        if (self.vectors.ndim != 3 or offsets.ndim != 1 or len(offsets) < 1 or offsets.dtype.kind not in "iu"
                or offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != self.vectors.shape[0]):
            raise UsageError(damaged.format("offsets and vectors do not match"))
        self.n_layers, self.dim = self.vectors.shape[1:]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.vectors[self.offsets[i] : self.offsets[i + 1]].astype(np.float32)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def _sizes_fit(offsets: h5py.Dataset, vectors: h5py.Dataset) -> bool:
    """Whether a cache file's datasets have the shapes ``build_features`` writes, every value stored in the file
    (it writes no compression: an unwritten or claimed-but-absent dataset holds fewer bytes than its shape says),
    and at most one offset per token and one more."""
    stored = all(d.id.get_storage_size() >= d.size * d.dtype.itemsize for d in (offsets, vectors))
    return (stored and vectors.ndim == 3 and vectors.dtype == np.float16 and offsets.ndim == 1
            and 1 <= offsets.shape[0] <= vectors.shape[0] + 1)


def cache_key(model_id: str, token_lists: Sequence[Sequence[str]]) -> str:
    digest = hashlib.sha256(f"{FEATURES_VERSION}:{model_id}".encode("utf-8"))
    digest.update(json.dumps([list(t) for t in token_lists], ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()[:24]


def model_id(embedder: Embedder) -> str:
    """What identifies the biLM's outputs: its config and the fingerprint of its weights (``weights_sha256``; cheap
    next to embedding a data set)."""
    digest = hashlib.sha256(json.dumps(embedder.bilm.config.to_options(), sort_keys=True).encode())
    digest.update(weights_sha256(embedder.bilm).encode())
    return digest.hexdigest()


def build_features(embedder: Embedder, token_lists: Sequence[Sequence[str]], path: str | Path,
                   progress: bool = True) -> FeatureCache:
    """Embed every sentence (all layers) into ``path``, written atomically; returns the cache."""
    lengths = np.array([len(t) for t in token_lists], dtype=np.int64)
    if (lengths == 0).any():
        raise UsageError(f"sentence {int(np.argmax(lengths == 0)) + 1} (counting from 1) has no tokens; drop empty "
                         f"sentences first")
    offsets = np.concatenate([[0], np.cumsum(lengths)])  # (S+1,)
    n_layers, dim = embedder.bilm.config.n_output_layers, embedder.dim
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("offsets", data=offsets)
        vectors = f.create_dataset("vectors", shape=(int(offsets[-1]), n_layers, dim), dtype=np.float16)
        bar = tqdm(total=len(token_lists), unit="sent", desc="features", disable=not progress)
        for indices in embedder.batches(token_lists):
            arrays = embedder.embed_tokens([token_lists[i] for i in indices])  # each (L+1, n, D)
            for i, array in zip(indices, arrays):
                with np.errstate(over="ignore"):  # beyond float16's range: infinite, refused just below
                    half = array.transpose(1, 0, 2).astype(np.float16)  # (n, L+1, D)
                if not np.isfinite(half).all():
                    raise UsageError(f"sentence {i + 1}: the biLM's vectors reach {float(np.abs(array).max()):.3g}, "
                                     f"beyond the float16 the task features are kept in (65,504 at most); this "
                                     f"biLM's outputs are far larger than any trained ELMo's: check the model")
                vectors[offsets[i] : offsets[i + 1]] = half
            bar.update(len(indices))
        bar.close()
    return FeatureCache(path)


def cached_features(embedder: Embedder, token_lists: Sequence[Sequence[str]], cache_dir: str | Path,
                    progress: bool = True) -> FeatureCache:
    """The cache for these sentences under this model: reused when it exists, built otherwise."""
    path = Path(cache_dir) / f"features-{cache_key(model_id(embedder), token_lists)}.h5"
    if not path.is_file():
        return build_features(embedder, token_lists, path, progress)
    cache = FeatureCache(path)
    if len(cache) != len(token_lists) or (cache.lengths() != [len(t) for t in token_lists]).any():
        raise UsageError(f"{path}: a feature cache of other sentences ({len(cache):,}, the data has "
                         f"{len(token_lists):,}, or of other lengths); delete it and run again to rebuild it")
    return cache


FEATURE_FILE = re.compile(r"features-[0-9a-f]{24}\.h5")  # ``cached_features``' names: nothing else is ours


def default_feature_folder() -> Path:
    """Where ``elmo task`` and ``elmo probe`` cache features without ``--cache``: ``$ELMO_CACHE/features``."""
    return cache_dir() / "features"


def feature_files() -> list[Path]:
    """The feature caches in the default folder (a user's own files there, or a --cache folder, are not ours)."""
    folder = default_feature_folder()
    if folder.exists() and not folder.is_dir():  # listing it would report an empty cache that can never hold one
        raise UsageError(f"{folder}: a file, where elmo keeps the features of task and probe runs; move the file, or "
                         f"point ELMO_CACHE at another folder")
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if FEATURE_FILE.fullmatch(p.name) and p.is_file() and not p.is_symlink())


def clear_feature_files() -> tuple[int, int]:
    """Delete the feature caches of the default folder, and what killed writers left there an hour ago or more;
    (files removed, bytes freed). The next task run embeds its data again."""
    removed = freed = 0
    for path in feature_files():
        size = path.stat().st_size
        path.unlink()
        removed, freed = removed + 1, freed + size
    folder = default_feature_folder()
    leftovers = {m.group(1) for p in (folder.iterdir() if folder.is_dir() else ())  # atomic_path's temporary names
                 if (m := re.match(rf"(\.{FEATURE_FILE.pattern}\.)", p.name))}
    for prefix in leftovers:
        remove_stale_temporaries(folder, prefix)
    return removed, freed

