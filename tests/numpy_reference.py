"""An independent NumPy forward pass written from docs/format.md alone, reading the official files directly.

It shares no code with the package (no conversions, no sorting, no batching): one sentence, zero initial state,
TensorFlow layouts and gate order as stored. Tests compare the package against it on variants the fixtures do not
cover (no residual, tanh, three layers, large weights that make the clips fire).
"""

from __future__ import annotations

import json

import h5py
import numpy as np


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


def _char_ids(word: str) -> list[int]:
    if word == "<S>":
        raw = [258, 256, 259]
    elif word == "</S>":
        raw = [258, 257, 259]
    else:
        raw = [258, *word.encode("utf-8", "ignore")[:48], 259]
    return [c + 1 for c in raw + [260] * (50 - len(raw))]


def reference_layers(options_path, weights_path, tokens: list[str]) -> np.ndarray:
    """(L + 1, n, 2P) layers for one sentence, boundaries removed, from zero state."""
    options = json.load(open(options_path))
    cnn, lstm = options["char_cnn"], options["lstm"]
    w = {}
    with h5py.File(weights_path, "r") as f:
        f.visititems(lambda name, obj: w.__setitem__(name, obj[()].astype(np.float64))
                     if isinstance(obj, h5py.Dataset) else None)
    table = np.concatenate([np.zeros((1, w["char_embed"].shape[1])), w["char_embed"]])
    words = ["<S>", *tokens, "</S>"]
    token_vectors = []
    for word in words:
        x = table[_char_ids(word)]  # (50, E)
        feats = []
        for i, (width, num) in enumerate(cnn["filters"]):
            kernel = w[f"CNN/W_cnn_{i}"][0]  # (width, E, num)
            out = np.stack([np.einsum("ke,ken->n", x[p : p + width], kernel) for p in range(50 - width + 1)])
            out = out.max(0) + w[f"CNN/b_cnn_{i}"]
            feats.append(np.tanh(out) if cnn["activation"] == "tanh" else np.maximum(out, 0))
        h = np.concatenate(feats)
        for k in range(cnn.get("n_highway") or 0):
            g = _sigmoid(h @ w[f"CNN_high_{k}/W_carry"] + w[f"CNN_high_{k}/b_carry"])
            t = np.maximum(h @ w[f"CNN_high_{k}/W_transform"] + w[f"CNN_high_{k}/b_transform"], 0)
            h = g * t + (1 - g) * h
        token_vectors.append(h @ w["CNN_proj/W_proj"] + w["CNN_proj/b_proj"])
    e = np.stack(token_vectors)  # (n + 2, P)

    def run(direction: int, inputs: np.ndarray) -> list[np.ndarray]:
        outputs, x = [], inputs
        for l in range(lstm.get("n_layers", 1)):  # bilm-tf's default
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{l}/LSTMCell"
            kernel, bias, proj = w[f"{prefix}/W_0"], w[f"{prefix}/B"], w.get(f"{prefix}/W_P_0")
            c, r = np.zeros(lstm["dim"]), np.zeros(lstm["projection_dim"])
            out = []
            for x_t in x:
                z = np.concatenate([x_t, r]) @ kernel + bias
                zi, zj, zf, zo = np.split(z, 4)
                c = _sigmoid(zf + 1.0) * c + _sigmoid(zi) * np.tanh(zj)
                if lstm.get("cell_clip"):
                    c = np.clip(c, -lstm["cell_clip"], lstm["cell_clip"])
                r = _sigmoid(zo) * np.tanh(c)
                if proj is not None:  # TensorFlow's LSTMCell without num_proj: no projection, no proj_clip
                    r = r @ proj
                if proj is not None and lstm.get("proj_clip"):
                    r = np.clip(r, -lstm["proj_clip"], lstm["proj_clip"])
                out.append(r)
            out = np.stack(out)
            if lstm.get("use_skip_connections") and l > 0:
                out = out + x
            outputs.append(out)
            x = out
        return outputs

    forward = run(0, e)
    backward = [o[::-1] for o in run(1, e[::-1])]
    layers = [np.concatenate([e, e], -1)] + [np.concatenate([f, b], -1) for f, b in zip(forward, backward)]
    return np.stack(layers)[:, 1:-1]
