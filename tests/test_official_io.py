"""Weight conversion quirks one by one, the export round trip, and one-line errors for bad files."""

import json

import h5py
import numpy as np
import pytest
import torch

from elmo.data.chars import batch_to_ids
from elmo.io.official import (
    WeightFileError, add_forget_bias, conv_from_tf, conv_to_tf, drop_padding_row, export_official,
    lstm_bias_from_tf, lstm_bias_to_tf, lstm_kernel_from_tf, lstm_kernel_to_tf, load_official,
    prepend_padding_row, remove_forget_bias, swap_gate_blocks,
)
from elmo.io.hdf5_walk import ExternalLinkError, visit_datasets
from elmo.io.load import load_bilm
from elmo.io.native import save_model
from tests.conftest import OPTIONS, WEIGHTS, random_bilm, small_config


def test_padding_row_is_zero_and_dropped_on_export():
    table = np.arange(6, dtype=np.float32).reshape(3, 2) + 1
    padded = prepend_padding_row(table)
    assert padded.shape == (4, 2) and not padded[0].any()
    assert np.array_equal(drop_padding_row(padded), table)


def test_conv_kernel_layout():
    kernel = np.random.rand(1, 3, 4, 5).astype(np.float32)  # (1, width, E, num)
    weight = conv_from_tf(kernel)
    assert weight.shape == (5, 4, 3) and weight[2, 1, 0] == kernel[0, 0, 1, 2]
    assert np.array_equal(conv_to_tf(weight), kernel)


def test_gate_blocks_i_j_f_o_become_i_f_j_o():
    blocks = np.repeat(np.array([0, 1, 2, 3], np.float32), 2)  # i i j j f f o o
    assert swap_gate_blocks(blocks).tolist() == [0, 0, 2, 2, 1, 1, 3, 3]
    assert np.array_equal(swap_gate_blocks(swap_gate_blocks(blocks)), blocks)


def test_forget_bias_is_added_to_the_forget_block_only():
    bias = np.zeros(8, np.float32)
    assert add_forget_bias(bias).tolist() == [0, 0, 1, 1, 0, 0, 0, 0]
    assert np.array_equal(remove_forget_bias(add_forget_bias(bias)), bias)
    tf_bias = np.arange(8, dtype=np.float32)  # i=0,1 j=2,3 f=4,5 o=6,7
    assert lstm_bias_from_tf(tf_bias).tolist() == [0, 1, 5, 6, 2, 3, 6, 7]
    assert np.array_equal(lstm_bias_to_tf(lstm_bias_from_tf(tf_bias)), tf_bias)


def test_lstm_kernel_splits_input_and_recurrent_rows():
    kernel = np.random.rand(3 + 2, 8).astype(np.float32)  # (In + P, 4C), In = 3, P = 2, C = 2
    w_ih, w_hh = lstm_kernel_from_tf(kernel, 3)
    assert w_ih.shape == (8, 3) and w_hh.shape == (8, 2)
    assert w_ih[2, 0] == kernel[0, 4]  # PyTorch row 2 = forget block (TF columns 4..5)
    assert np.array_equal(lstm_kernel_to_tf(w_ih, w_hh), kernel)


def test_fixture_round_trips_byte_for_byte(tmp_path):
    model = load_official(OPTIONS, WEIGHTS)
    options, weights = export_official(model, tmp_path)
    with h5py.File(WEIGHTS) as a, h5py.File(weights) as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for name in names:
            assert b[name].shape == a[name].shape and b[name].dtype == np.float32
            np.testing.assert_allclose(b[name][()], a[name][()], atol=1e-6, rtol=0)
    again = load_official(options, weights)
    ids = batch_to_ids([["A", "round", "trip", "."]])
    with torch.no_grad():
        assert all(torch.equal(x, y) for x, y in zip(model(ids).layers, again(ids).layers))


def test_native_format_round_trip(tmp_path):
    from elmo.io.native import load_model, save_model

    model = random_bilm(small_config(use_skip_connections=False))
    save_model(model, tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert loaded.config == model.config
    for (k, v), (k2, v2) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]


def _copy_with(tmp_path, change):
    path = tmp_path / "w.hdf5"
    with h5py.File(WEIGHTS) as src, h5py.File(path, "w") as dst:
        def copy(name, obj):
            if isinstance(obj, h5py.Dataset):
                dst.create_dataset(name, data=obj[()])
        src.visititems(copy)
        change(dst)
    return path


def test_missing_dataset_is_named(tmp_path):
    path = _copy_with(tmp_path, lambda f: f.__delitem__("RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"))
    with pytest.raises(WeightFileError, match=r"dataset 'RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B' is missing"):
        load_official(OPTIONS, path)


def test_wrong_shape_is_named_with_both_shapes(tmp_path):
    def shrink(f):
        del f["CNN/W_cnn_2"]
        f.create_dataset("CNN/W_cnn_2", data=np.zeros((1, 3, 4, 8), np.float32))
    path = _copy_with(tmp_path, shrink)
    with pytest.raises(WeightFileError, match=r"'CNN/W_cnn_2' has shape \(1, 3, 4, 8\) where options.json implies "
                                              r"\(1, 3, 4, 16\)"):
        load_official(OPTIONS, path)


def test_mismatched_options_are_reported(tmp_path):
    options = json.loads(OPTIONS.read_text())
    options["lstm"]["dim"] = 128
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(WeightFileError, match="W_0' has shape \\(32, 256\\) where options.json implies \\(32, 512\\)"):
        load_official(tmp_path / "options.json", WEIGHTS)


def test_truncated_file_is_one_line(tmp_path):
    path = tmp_path / "cut.hdf5"
    path.write_bytes(WEIGHTS.read_bytes()[:5000])
    with pytest.raises(WeightFileError, match="not a readable HDF5 file") as err:
        load_official(OPTIONS, path)
    assert "\n" not in str(err.value)


def test_non_finite_weights_are_refused(tmp_path):
    def poison(f):
        data = f["CNN_proj/b_proj"][()]
        data[3] = np.nan
        f["CNN_proj/b_proj"][...] = data
    with pytest.raises(WeightFileError, match="NaN"):
        load_official(OPTIONS, _copy_with(tmp_path, poison))


def test_absent_optional_projections_mean_identity(tmp_path):
    from elmo.config import CharCNNConfig

    # F == P: bilm-tf writes no CNN_proj; P == C: no W_P_0
    config = small_config(dim=8).replace(char_cnn=CharCNNConfig(embedding_dim=4, filters=((1, 3), (2, 5)),
                                                                 n_highway=0))
    options, weights = export_official(random_bilm(config), tmp_path)
    with h5py.File(weights, "a") as f:
        for name in [n for n in ["CNN_proj/W_proj", "CNN_proj/b_proj"]] + [
                f"RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_P_0" for d in range(2) for l in range(2)]:
            del f[name]
    model = load_official(options, weights)
    assert torch.equal(model.char_encoder.projection.weight, torch.eye(8))
    assert torch.equal(model.forward_stack.layers[1].weight_proj, torch.eye(8))


def test_native_errors_are_one_line(tmp_path):
    from elmo.io.native import ModelFileError, load_model, save_model

    save_model(random_bilm(small_config()), tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelFileError, match="not a readable safetensors file"):
        load_model(tmp_path / "m")
    save_model(random_bilm(small_config(dim=32)), tmp_path / "n")
    (tmp_path / "m" / "model.safetensors").write_bytes((tmp_path / "n" / "model.safetensors").read_bytes())
    with pytest.raises(ModelFileError, match=r"tensor '[\w.]+' has shape \(128,?.*\) where the config implies \(96,?.*\)"):
        load_model(tmp_path / "m")


@pytest.mark.parametrize("call, problem", [
    (lambda m, d: export_official(m, d / "a", weights_name="options.json"), "weights_name ending in .hdf5"),
    (lambda m, d: export_official(m, d / "b", weights_name="../escaped.hdf5"), "weights_name ending in .hdf5"),
    (lambda m, d: export_official(None, d / "c"), "export_official takes a BiLM"),
    (lambda m, d: export_official(m, d / "file.txt"), "is a file"),
    (lambda m, d: save_model(m, d / "e", dtype=torch.int8), "dtype must be"),
    (lambda m, d: save_model(torch.nn.Linear(2, 2), d / "f"), "save_model takes a BiLM"),
    (lambda m, d: save_model(m, ""), "an empty path"),
    (lambda m, d: load_official(None, None), "the options file must be a path"),
    (lambda m, d: load_bilm(123), "model must be a path"),
])
def test_the_file_functions_refuse_odd_arguments_before_writing(tmp_path, call, problem):
    """int8 weights that load as damage, weights written outside the folder or over options.json, deep pathlib or
    attribute errors: each is one ElmoError now, and nothing is written."""
    from elmo.errors import ElmoError

    (tmp_path / "file.txt").write_text("mine")
    with pytest.raises(ElmoError, match=problem):
        call(random_bilm(small_config()), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]
    assert not (tmp_path.parent / "escaped.hdf5").exists()


def _moved_behind_soft_link(f, name: str, to: str) -> None:
    f.move(name, to)
    f[name] = h5py.SoftLink("/" + to)


def test_datasets_and_groups_behind_soft_links_load_as_the_file_itself(tmp_path):
    """A weight file whose datasets are reached through soft links (other names inside the same file) was refused as
    missing them: only hard-linked names were listed."""
    def change(f):
        _moved_behind_soft_link(f, "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B", "elsewhere_B")
        _moved_behind_soft_link(f, "CNN_high_0", "elsewhere_highway")
    path = _copy_with(tmp_path, change)
    linked, plain = load_official(OPTIONS, path), load_official(OPTIONS, WEIGHTS)
    assert all(torch.equal(linked.state_dict()[k], v) for k, v in plain.state_dict().items())


def test_a_link_to_another_file_is_refused_in_one_line(tmp_path):
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as f:
        f.create_dataset("B", data=np.zeros(4, dtype=np.float32))

    def change(f):
        del f["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"]
        f["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"] = h5py.ExternalLink(str(other), "/B")
    with pytest.raises(WeightFileError, match=r"'RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B' is a link to another file"):
        load_official(OPTIONS, _copy_with(tmp_path, change))


def test_a_soft_link_leading_through_a_link_to_another_file_opens_nothing_there(tmp_path, monkeypatch):
    """A soft link sorting before the external link it leads to (``a_soft -> /zz_ext``) made the walk open and read
    the other file before the refusal."""
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as f:
        f.create_dataset("B", data=np.zeros(4, dtype=np.float32))

    def change(f):
        f["zz_ext"] = h5py.ExternalLink(str(other), "/B")
        f["a_soft"] = h5py.SoftLink("/zz_ext")
    path = _copy_with(tmp_path, change)
    looked = []
    with pytest.raises(ExternalLinkError, match=r"'zz_ext' is a link to another file"):
        visit_datasets(path, lambda dataset: looked.append(dataset.name))
    assert "/a_soft" not in looked and looked  # the file's own datasets only
    with pytest.raises(WeightFileError, match=r"'zz_ext' is a link to another file"):
        load_official(OPTIONS, path)


def test_a_soft_link_that_leads_nowhere_is_a_missing_dataset(tmp_path):
    def change(f):
        del f["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"]
        f["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"] = h5py.SoftLink("/nowhere")
    with pytest.raises(WeightFileError, match=r"dataset 'RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B' is missing"):
        load_official(OPTIONS, _copy_with(tmp_path, change))


@pytest.mark.parametrize("case", ["hard link", "soft link to a group", "link inside a linked group", "circle"])
def test_a_dataset_under_two_model_names_or_behind_nested_links_loads(tmp_path, case):
    """One dataset serving two of the model's names (a hard link, or a layer's group linked to another's) was listed
    under one name only, and the other was "missing"; a soft link inside a soft-linked group left its dataset an
    "unexpected" stray. Every name h5py itself resolves now counts: the model equals one read from a file holding
    copies where the links were."""
    b0, b1 = "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/B", "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/B"

    def change(f, copies):
        if case == "hard link":
            del f[b1]
            f[b1] = f[b0] if not copies else f[b0][()]
        elif case == "soft link to a group":
            del f["RNN_1"]
            if copies:
                f.copy(f["RNN_0"], "RNN_1")
            else:
                f["RNN_1"] = h5py.SoftLink("/RNN_0")
        elif case == "link inside a linked group" and not copies:
            f.move("CNN", "CNN_real")
            f.move("CNN_real/W_cnn_0", "store_w0")
            f["CNN_real/W_cnn_0"] = h5py.SoftLink("/store_w0")
            f["CNN"] = h5py.SoftLink("/CNN_real")
        elif case == "circle" and not copies:  # a circle of soft links no model name uses
            f["loop_a"], f["loop_b"] = h5py.SoftLink("/loop_b"), h5py.SoftLink("/loop_a")
    (tmp_path / "linked").mkdir(), (tmp_path / "copied").mkdir()
    linked = load_official(OPTIONS, _copy_with(tmp_path / "linked", lambda f: change(f, False)))
    copied = load_official(OPTIONS, _copy_with(tmp_path / "copied", lambda f: change(f, True)))
    assert all(torch.equal(linked.state_dict()[k], v) for k, v in copied.state_dict().items())
