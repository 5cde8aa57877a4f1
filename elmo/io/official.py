"""The official bilm-tf / AllenNLP weight files (``options.json`` + ``.hdf5``), read and written.

The conversion is a table: each row names our parameter(s), the hdf5 dataset, and the pair of small functions
that turn one layout into the other. Each TensorFlow quirk is one named function below, tested on its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Collection

import h5py
import numpy as np
import torch

from elmo.config import TOKENIZER_KEY, ElmoConfig, file_tokenizer
from elmo.errors import ElmoError, InputTypeError, UsageError
from elmo.io.atomic import atomic_path, check_free_space, output_folder, path_argument, write_errors
from elmo.io.hdf5_walk import ExternalLinkError, hdf5_problem, storage_problem, visit_datasets
from elmo.io.file_kinds import ADVICE, HDF5_KIND, JSON_KIND, describe_file, hdf5_entries, holds_weights
from elmo.io.native import check_finite_weight
from elmo.model.bilm import BiLM


class WeightFileError(ElmoError, ValueError):
    """A weight file that does not hold the model its options describe (one line: file, dataset, shapes)."""


# ---- one function per quirk of the TensorFlow layout --------------------------------------------------------

def prepend_padding_row(table: np.ndarray) -> np.ndarray:
    """bilm-tf stores rows for raw ids 0..260; we index by shifted ids, where 0 is "no character" and embeds to 0."""
    return np.concatenate([np.zeros((1, table.shape[1]), table.dtype), table])


def drop_padding_row(table: np.ndarray) -> np.ndarray:
    return table[1:]


def conv_from_tf(kernel: np.ndarray) -> np.ndarray:
    """TF conv2d kernel (1, width, E, num) -> Conv1d weight (num, E, width); both correlate without a flip."""
    return np.ascontiguousarray(kernel[0].transpose(2, 1, 0))


def conv_to_tf(weight: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(weight.transpose(2, 1, 0)[None])


def transpose(matrix: np.ndarray) -> np.ndarray:
    """TF right-multiplies (x @ W, W is (in, out)); torch.nn.Linear stores (out, in). Its own inverse."""
    return np.ascontiguousarray(matrix.T)


def swap_gate_blocks(array: np.ndarray) -> np.ndarray:
    """TF orders the four gate blocks i, j, f, o; PyTorch i, f, g(=j), o. Swapping blocks 1 and 2 converts either way."""
    i, j, f, o = np.split(array, 4, axis=0)
    return np.concatenate([i, f, j, o], axis=0)


def add_forget_bias(bias: np.ndarray) -> np.ndarray:
    """TF's LSTMCell adds a constant 1.0 to the forget gate at run time; we fold it into the stored bias."""
    out = bias.copy()
    block = len(bias) // 4
    out[block : 2 * block] += 1.0  # PyTorch order: the forget block is block 1
    return out


def remove_forget_bias(bias: np.ndarray) -> np.ndarray:
    out = bias.copy()
    block = len(bias) // 4
    out[block : 2 * block] -= 1.0
    return out


def lstm_kernel_from_tf(kernel: np.ndarray, input_size: int) -> tuple[np.ndarray, np.ndarray]:
    """TF's one kernel W_0 (In + P, 4C) over concat(x, r) -> weight_ih (4C, In), weight_hh (4C, P)."""
    w = swap_gate_blocks(transpose(kernel))  # (4C, In + P)
    return np.ascontiguousarray(w[:, :input_size]), np.ascontiguousarray(w[:, input_size:])


def lstm_kernel_to_tf(weight_ih: np.ndarray, weight_hh: np.ndarray) -> np.ndarray:
    return transpose(swap_gate_blocks(np.concatenate([weight_ih, weight_hh], axis=1)))


def lstm_bias_from_tf(bias: np.ndarray) -> np.ndarray:
    return add_forget_bias(swap_gate_blocks(bias))


def lstm_bias_to_tf(bias: np.ndarray) -> np.ndarray:
    return swap_gate_blocks(remove_forget_bias(bias))


# ---- the name table ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One hdf5 dataset <-> one or more of our parameters."""

    dataset: str
    params: tuple[str, ...]
    shape: tuple[int, ...]  # the dataset's shape, as options.json implies
    to_ours: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    to_tf: Callable[..., np.ndarray]


def _one(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], tuple[np.ndarray, ...]]:
    return lambda array: (fn(array),)


def name_table(config: ElmoConfig) -> list[Entry]:
    """Every dataset of an official weight file for ``config``, in the order bilm-tf writes them."""
    cnn, lstm = config.char_cnn, config.lstm
    n_filters, proj, cell = cnn.n_filters, lstm.projection_dim, lstm.dim
    rows = [Entry("char_embed", ("char_encoder.char_embedding.weight",), (261, cnn.embedding_dim),
                  _one(prepend_padding_row), drop_padding_row)]
    for i, (width, num) in enumerate(cnn.filters):
        rows += [
            Entry(f"CNN/W_cnn_{i}", (f"char_encoder.convolutions.{i}.weight",), (1, width, cnn.embedding_dim, num),
                  _one(conv_from_tf), conv_to_tf),
            Entry(f"CNN/b_cnn_{i}", (f"char_encoder.convolutions.{i}.bias",), (num,), _one(np.asarray), np.asarray),
        ]
    for k in range(cnn.n_highway):
        ours = f"char_encoder.highways.{k}"
        rows += [
            Entry(f"CNN_high_{k}/W_carry", (f"{ours}.gate.weight",), (n_filters, n_filters), _one(transpose), transpose),
            Entry(f"CNN_high_{k}/b_carry", (f"{ours}.gate.bias",), (n_filters,), _one(np.asarray), np.asarray),
            Entry(f"CNN_high_{k}/W_transform", (f"{ours}.transform.weight",), (n_filters, n_filters),
                  _one(transpose), transpose),
            Entry(f"CNN_high_{k}/b_transform", (f"{ours}.transform.bias",), (n_filters,), _one(np.asarray), np.asarray),
        ]
    rows += [
        Entry("CNN_proj/W_proj", ("char_encoder.projection.weight",), (n_filters, proj), _one(transpose), transpose),
        Entry("CNN_proj/b_proj", ("char_encoder.projection.bias",), (proj,), _one(np.asarray), np.asarray),
    ]
    for d, stack in enumerate(("forward_stack", "backward_stack")):
        for l in range(lstm.n_layers):
            tf = f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell"
            ours = f"{stack}.layers.{l}"
            rows += [
                Entry(f"{tf}/W_0", (f"{ours}.weight_ih", f"{ours}.weight_hh"), (2 * proj, 4 * cell),
                      lambda a: lstm_kernel_from_tf(a, proj), lstm_kernel_to_tf),
                Entry(f"{tf}/B", (f"{ours}.bias",), (4 * cell,), _one(lstm_bias_from_tf), lstm_bias_to_tf),
                Entry(f"{tf}/W_P_0", (f"{ours}.weight_proj",), (cell, proj), _one(transpose), transpose),
            ]
    return rows


def _identity_fallbacks(config: ElmoConfig) -> dict[str, Callable[[], np.ndarray]]:
    """bilm-tf omits CNN_proj when F == P and W_P_0 when P == C; an absent one then means identity. Each array is
    made only where it is used (an identity of P = 8,192 takes 256 MB; checking a file needs only the names)."""
    fallbacks: dict[str, Callable[[], np.ndarray]] = {}
    n_filters, proj, cell = config.char_cnn.n_filters, config.lstm.projection_dim, config.lstm.dim
    if n_filters == proj:
        fallbacks["CNN_proj/W_proj"] = lambda: np.eye(proj, dtype=np.float32)
        fallbacks["CNN_proj/b_proj"] = lambda: np.zeros(proj, np.float32)
    if cell == proj:
        for d in range(2):
            for l in range(config.lstm.n_layers):
                fallbacks[f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_P_0"] = lambda: np.eye(proj, dtype=np.float32)
    return fallbacks


#: bilm-tf's softmax, which a weight file holds when ``dump_weights`` is run without its softmax filter (bilm-tf
#: issue #126; AllenNLP's softmax file uses the same names). Not part of the biLM: AllenNLP and bilm-tf pass over it,
#: so loading does too, unread (it can be 1.6 GB), once its shapes are checked to be a softmax over ``P``.
SOFTMAX_DATASETS = ("softmax/W", "softmax/b")


# ---- load -----------------------------------------------------------------------------------------------------

def read_official_state(weight_file: str | Path, config: ElmoConfig,
                        arrays: dict[str, np.ndarray] | None = None) -> dict[str, torch.Tensor]:
    """Our state dict from an official weight file (``arrays``: its datasets, when already read), checking every
    dataset's presence, shape, type and values."""
    path = Path(weight_file)
    if arrays is None:
        arrays = _read_hdf5(path, config)
    else:
        check_datasets(path, config, {name: (tuple(a.shape), a.dtype) for name, a in arrays.items()})
    fallbacks = _identity_fallbacks(config)
    state: dict[str, torch.Tensor] = {}
    for entry in name_table(config):
        array = arrays[entry.dataset] if entry.dataset in arrays else fallbacks[entry.dataset]()
        with np.errstate(over="ignore"):  # float64 values beyond float32's range become inf, refused below
            array = array.astype(np.float32, copy=False)
        if not np.isfinite(array).all():
            raise WeightFileError(f"{path}: dataset {entry.dataset!r} holds NaN or infinite values, or values beyond "
                                  f"float32's range")
        for name, value in zip(entry.params, entry.to_ours(array)):
            state[name] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
    return state


def _read_hdf5(path: Path, config: ElmoConfig | None = None) -> dict[str, np.ndarray]:
    """Every dataset of an hdf5 file, by its full path without the leading '/'. With ``config``, every dataset's
    name, shape and type are checked against it first, before any data is read (a damaged or hostile file can
    declare a sparse dataset of terabytes)."""
    if config is not None:
        check_datasets(path, config, dataset_shapes(path, config))
    check_storage(path, config)
    arrays = _visit_datasets(path, lambda dataset: None if _is_softmax(dataset) else dataset[()], _wanted(config))
    return {name: array for name, array in arrays.items() if array is not None}


def _is_softmax(dataset: h5py.Dataset) -> bool:
    """A dataset of bilm-tf's softmax (``SOFTMAX_DATASETS``): never read."""
    return dataset.name.lstrip("/") in SOFTMAX_DATASETS


def dataset_shapes(path: Path, config: ElmoConfig | None = None) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of every dataset of an hdf5 file, read from its headers (no data is read); a dataset with
    several names (soft links) under the one ``config``'s model gives it, where it has one."""
    if not path.exists():
        raise WeightFileError(f"{path}: no such weight file")
    return _visit_datasets(path, lambda dataset: (tuple(dataset.shape or ()), dataset.dtype), _wanted(config))


def _wanted(config: ElmoConfig | None) -> set[str]:
    """The dataset names of ``config``'s model and bilm-tf's softmax: the names a dataset with several is listed by."""
    return ({entry.dataset for entry in name_table(config)} if config else set()) | set(SOFTMAX_DATASETS)


def check_storage(path: Path, config: ElmoConfig | None = None) -> None:
    """Every dataset's values are stored in the file itself, all of them written (from the headers). HDF5 answers a
    read of values never written, or of a virtual dataset whose source file is missing, with fill values (zeros):
    weights that would load without an error."""
    problems = {name: problem for name, problem in _visit_datasets(path, storage_problem, _wanted(config)).items()
                if problem and name not in SOFTMAX_DATASETS}  # the softmax is never read
    if problems:
        name, problem = next(iter(problems.items()))
        raise WeightFileError(f"{path}: dataset {name!r} {problem}; the file is damaged or not a bilm-tf weight file")


def _visit_datasets(path: Path, look: Callable[[h5py.Dataset], object], wanted: Collection[str] = ()) -> dict[str, Any]:
    """``visit_datasets`` with its problems as one-line ``WeightFileError``s."""
    try:
        return visit_datasets(path, look, wanted)
    except ExternalLinkError as err:
        raise WeightFileError(f"{path}: {err}") from None
    except (OSError, KeyError, RuntimeError, ValueError) as err:
        raise WeightFileError(f"{path}: not a readable HDF5 file: {hdf5_problem(err)}") from None


def check_datasets(path: Path, config: ElmoConfig, found: dict[str, tuple[tuple[int, ...], np.dtype]]) -> None:
    """Every dataset the file declares is one ``config`` implies, of its shape, and of floating-point numbers."""
    table = {entry.dataset: entry.shape for entry in name_table(config)}
    fallbacks = _identity_fallbacks(config)
    _check_softmax(path, config, {name: found[name] for name in SOFTMAX_DATASETS if name in found})
    unexpected = sorted(set(found) - set(table) - set(SOFTMAX_DATASETS))
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise WeightFileError(f"{path}: unexpected dataset {unexpected[0]!r}{more}: not part of the model options.json "
                              f"describes; check that the two files belong together")
    for name, shape in table.items():
        if name not in found:
            if name in fallbacks:
                continue
            raise WeightFileError(f"{path}: dataset {name!r} is missing (options.json implies shape {shape})")
        got, dtype = found[name]
        if got != shape:
            raise WeightFileError(f"{path}: dataset {name!r} has shape {got} where options.json implies {shape}; "
                                  f"check that the two files belong together")
        if dtype.kind != "f":
            raise WeightFileError(f"{path}: dataset {name!r} holds {dtype} values where floating-point numbers are "
                                  f"expected; the file is not a weight file, or is damaged")


def _check_softmax(path: Path, config: ElmoConfig, found: dict[str, tuple[tuple[int, ...], np.dtype]]) -> None:
    """bilm-tf's softmax datasets, where a file holds them, are ``W`` (V, P) and ``b`` (V,) of floating-point numbers:
    passed over only when they are what their names say, not any dataset that happens to carry the name."""
    shapes = {name: shape for name, (shape, _) in found.items()}
    rows = {shape[0] for shape in shapes.values() if shape}
    proj = config.lstm.projection_dim
    weight, bias = SOFTMAX_DATASETS
    if any(dtype.kind != "f" or len(rows) != 1 or shape != ((*rows, proj) if name == weight else (*rows,))
           for name, (shape, dtype) in found.items()):
        described = ", ".join(f"{name!r} {shapes[name]} {found[name][1]}" for name in found)
        raise WeightFileError(f"{path}: holds {described}, not bilm-tf's softmax over the projection ({weight!r} "
                              f"(V, {proj}), {bias!r} (V,), floating-point); the file is damaged or not a biLM's")


def check_official_pair(options_file: str | Path, weight_file: str | Path) -> None:
    """Refuse, in one line, the wrong file in either place before anything is parsed: a folder, the two files
    swapped, a weight file that is not HDF5 (saying what it is), or an HDF5 file without weights."""
    options, weights = path_argument(options_file, "the options file"), path_argument(weight_file, "the weight file")
    for path, role, expected in ((options, "options", "options.json"), (weights, "weights", "weights .hdf5")):
        if path.is_dir():
            raise UsageError(f"{path}: is a folder, where the {role} file ({expected}) is expected; give the file "
                             f"inside it, or the folder itself as the model (model=FOLDER, --model FOLDER)")
        if path.exists() and not path.is_file():  # reading a pipe would block, a device never end
            raise UsageError(f"{path}: a pipe or a device, where the {role} file ({expected}) is expected; save it "
                             f"to a file and give that")
    if not weights.exists():
        raise WeightFileError(f"{weights}: no such weight file")
    options_kind, weights_kind = describe_file(options), describe_file(weights)
    if options_kind == HDF5_KIND and weights_kind == JSON_KIND:
        raise UsageError(f"options and weights look swapped: the options {options} is an HDF5 file and the weights "
                         f"{weights} is JSON; pass the .json as options and the .hdf5 as weights")
    if weights_kind != HDF5_KIND:
        raise WeightFileError(f"{weights}: not an HDF5 weight file but {weights_kind}{ADVICE.get(weights_kind, '')}")
    if options_kind == HDF5_KIND:
        raise UsageError(f"{options}: an HDF5 file, where the options file (options.json) is expected")
    entries = hdf5_entries(weights)
    if entries is not None and not holds_weights(entries):
        shown = ", ".join(repr(name) for name in entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise WeightFileError(f"{weights}: an HDF5 file without bilm-tf weights (it holds {len(entries)} "
                              f"{'entry' if len(entries) == 1 else 'entries'}: {shown or 'nothing'}; vectors from an embedding run?); give the weight file, the one "
                              f"with char_embed, CNN and RNN_0 (e.g. lm_weights.hdf5 or *_weights.hdf5)")


def unclipped_without_projection(config: ElmoConfig, datasets: set[str]) -> ElmoConfig:
    """bilm-tf builds its LSTM cells with ``num_proj`` only when P < C, and TensorFlow clips the projection only
    when there is one: a file with P == C and no ``W_P_0`` runs the identity (our fallback) without ``proj_clip``."""
    lstm = config.lstm
    if lstm.proj_clip is None or lstm.dim != lstm.projection_dim or any("/W_P_0" in name for name in datasets):
        return config
    return replace(config, lstm=replace(lstm, proj_clip=None))


def load_official(options_file: str | Path, weight_file: str | Path, stateful: bool = False) -> BiLM:
    """Build a BiLM from an official ``options.json`` and load its ``.hdf5`` weights strictly."""
    check_official_pair(options_file, weight_file)
    config = ElmoConfig.from_file(options_file)  # every size within elmo.limits
    config = unclipped_without_projection(config, set(dataset_shapes(Path(weight_file), config)))
    arrays = _read_hdf5(Path(weight_file), config)  # names, shapes and types checked before any data is read
    with torch.device("meta"):  # no random initialisation: the file's arrays become the parameters
        model = BiLM.from_config(config, stateful=stateful)
    model.tokenizer_name = file_tokenizer(options_file)  # named in our exports; in others' files: whitespace
    model.load_state_dict(read_official_state(weight_file, config, arrays), strict=True, assign=True)
    model.source_files = (Path(options_file), Path(weight_file))
    return model.eval()


# ---- export -----------------------------------------------------------------------------------------------------

def official_arrays(model: BiLM) -> dict[str, np.ndarray]:
    """The datasets of the official weight file for ``model`` (finite: a NaN would make a file no reader loads)."""
    state = {}
    for key, value in model.state_dict().items():
        value = value.detach().cpu().float()
        check_finite_weight(key, value, "export_official")
        state[key] = value.numpy()
    return {entry.dataset: entry.to_tf(*(state[p] for p in entry.params)).astype(np.float32)
            for entry in name_table(model.config)}


def export_official(model: BiLM, out_dir: str | Path, weights_name: str = "weights.hdf5") -> tuple[Path, Path]:
    """Write ``options.json`` + the weight file that bilm-tf and AllenNLP load; returns both paths. A model that
    splits raw text with a tokenizer names it in options.json (``"tokenizer"``: an extra key those readers ignore)."""
    if not isinstance(model, BiLM) or not re.fullmatch(r"[^/\\]+\.(hdf5|h5)", str(weights_name), re.IGNORECASE):
        raise InputTypeError(f"export_official takes a BiLM and a weights_name ending in .hdf5 or .h5 (no folder), "
                             f"got {type(model).__name__} and {weights_name!r}")
    out = output_folder(out_dir, "export_official's out_dir")
    options_path, weights_path = out / "options.json", out / weights_name
    arrays = official_arrays(model)
    check_free_space(weights_path, sum(a.nbytes for a in arrays.values()) + (1 << 20), "the weight file")
    out.mkdir(parents=True, exist_ok=True)
    with write_errors(weights_path), atomic_path(weights_path) as tmp:  # libhdf5 can crash when the disk fills
        with h5py.File(tmp, "w") as f:
            for name, array in arrays.items():
                f.create_dataset(name, data=array)
    options = model.config.to_options()
    if model.tokenizer_name is not None:
        options[TOKENIZER_KEY] = model.tokenizer_name
    with atomic_path(options_path) as tmp:
        tmp.write_text(json.dumps(options, indent=2) + "\n", encoding="utf-8")
    return options_path, weights_path
