"""Sampled softmax: the log-uniform sampler, expected counts, accidental hits, and the loss itself."""

import math

import numpy as np
import torch

from elmo.training.row_gradients import RowGradients
from elmo.training.softmax import LMSoftmax, LogUniformSampler, _first_draws


def test_log_uniform_probabilities_sum_to_one_and_favour_low_ids():
    sampler = LogUniformSampler(1000)
    p = sampler.probability(torch.arange(1000))
    assert abs(float(p.sum()) - 1.0) < 1e-9 and bool((p[:-1] > p[1:]).all())


def test_first_draws_are_each_distinct_ids_first_position_in_order():
    """The sampler's first-occurrence table against NumPy's ``unique(return_index=True)``, repeats included."""
    rng = np.random.default_rng(0)
    for size, vocab in ((1, 3), (50, 7), (4_096, 50_003), (12_288, 1_000)):
        draws = rng.integers(0, vocab, size)
        expected = np.sort(np.unique(draws, return_index=True)[1])
        assert np.array_equal(_first_draws(draws, vocab), expected)


def test_sample_is_unique_and_tries_count_the_draws():
    sampler = LogUniformSampler(500, seed=1)
    candidates, tries = sampler.sample(100)
    assert len(candidates) == 100 and len(set(candidates.tolist())) == 100 and tries >= 100
    # the empirical frequency of id 0 across samples matches its expected count
    hits, runs = 0, 300
    for _ in range(runs):
        c, t = sampler.sample(20)
        hits += int((c == 0).any())
    c, t = sampler.sample(20)
    expected = math.exp(float(sampler.log_expected_count(torch.tensor([0]), t)))
    assert abs(hits / runs - expected) < 0.1


def test_sampler_is_reproducible_from_its_state():
    a = LogUniformSampler(300, seed=5)
    a.sample(50)
    state = a.state()
    first = a.sample(50)
    b = LogUniformSampler(300, seed=99)
    b.set_state(state)
    second = b.sample(50)
    assert torch.equal(first[0], second[0]) and first[1] == second[1]


def test_sampled_loss_formula_with_accidental_hits_removed():
    torch.manual_seed(0)
    softmax = LMSoftmax(10, 4)
    hidden, targets = torch.randn(3, 4), torch.tensor([1, 5, 7])
    candidates = torch.tensor([0, 5, 9])  # 5 is an accidental hit for row 1
    lq_t, lq_c = torch.tensor([-1.0, -2.0, -3.0]), torch.tensor([-0.5, -2.0, -4.0])
    loss = softmax.sampled_loss(hidden, targets, candidates, lq_t, lq_c)
    logits = hidden @ softmax.weight.t() + softmax.bias
    manual = []
    for row in range(3):
        true = logits[row, targets[row]] - lq_t[row]
        others = [logits[row, c] - lq_c[j] for j, c in enumerate(candidates.tolist()) if c != targets[row]]
        manual.append(torch.logsumexp(torch.stack([true, *others]), 0) - true)
    assert torch.allclose(loss, torch.stack(manual).mean(), atol=1e-6)


def test_full_loss_ignores_minus_one_targets():
    softmax = LMSoftmax(6, 3)
    hidden = torch.randn(4, 3)
    full = softmax.full_loss(hidden, torch.tensor([1, -1, 2, -1]))
    part = softmax.full_loss(hidden[[0, 2]], torch.tensor([1, 2]))
    assert torch.allclose(full, part)


def test_sampled_loss_gradients_match_plain_cross_entropy_over_the_concatenation():
    """The fused loss (exponentials computed in place, hand-written backward) against autograd through
    ``cross_entropy(cat([true, sampled]))``, hits included, in float64."""
    torch.manual_seed(1)
    softmax = LMSoftmax(50, 6).double()
    hidden = torch.randn(9, 6, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([3, 0, 7, 7, 49, 1, 2, 0, 11])
    candidates = torch.tensor([0, 7, 20, 1, 33, 5])
    lq_t, lq_c = torch.rand(9, dtype=torch.float64) - 3, torch.rand(6, dtype=torch.float64) - 2
    weights = torch.rand(9, dtype=torch.float64)  # a non-uniform upstream gradient
    (softmax.sampled_loss(hidden, targets, candidates, lq_t, lq_c, reduction="none") * weights).sum().backward()
    fused = [hidden.grad.clone(), softmax.weight.grad.clone(), softmax.bias.grad.clone()]
    for tensor in (hidden, softmax.weight, softmax.bias):
        tensor.grad = None
    true = (hidden * softmax.weight[targets]).sum(-1) + softmax.bias[targets] - lq_t
    sampled = hidden @ softmax.weight[candidates].t() + softmax.bias[candidates] - lq_c
    sampled = sampled.masked_fill(targets.unsqueeze(1) == candidates.unsqueeze(0), float("-inf"))
    plain = torch.nn.functional.cross_entropy(torch.cat([true.unsqueeze(1), sampled], 1),
                                              torch.zeros(9, dtype=torch.long), reduction="none")
    (plain * weights).sum().backward()
    for ours, theirs in zip(fused, (hidden.grad, softmax.weight.grad, softmax.bias.grad)):
        assert torch.allclose(ours, theirs, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda h: softmax.sampled_loss(h, targets, candidates, lq_t, lq_c, reduction="none"),
        (hidden.detach().requires_grad_(),))


def test_expected_count_when_no_draw_repeated_is_p_times_tries_as_tensorflow():
    sampler = LogUniformSampler(793471)
    ids = torch.tensor([0, 5, 1000])
    p = sampler.probability(ids)
    assert torch.allclose(sampler.log_expected_count(ids, 2, 2), torch.log(2 * p).float())
    assert torch.allclose(sampler.log_expected_count(ids, 3, 2), torch.log(1 - (1 - p) ** 3).float())
    assert abs(float(sampler.log_expected_count(ids[:1], 2, 2)) - (-2.2823)) < 1e-3  # TF's figure for id 0


def test_both_directions_in_one_call_give_the_loss_and_gradients_of_each_direction_s_real_positions_alone():
    """The training step runs both directions' sampled softmax as one (one gather of every row it needs, batched
    products); each direction keeps its own negatives and accidental hits, and a position without a target (-1)
    takes row 0 there, and masking its loss leaves every gradient as if the position were not there."""
    torch.manual_seed(0)
    softmax = LMSoftmax(40, 6)
    hidden = torch.randn(2, 5, 6)
    # hits: 3, 0, 39 in direction 0, and 1, 1, 5 in 1; 30 and 9 are the other direction's negatives only
    targets = torch.tensor([[3, 30, -1, 0, 39], [1, 1, 9, -1, 5]])
    candidates = torch.tensor([[0, 2, 3, 9, 39], [1, 4, 5, 30, 31]])
    logq_t, logq_c = torch.randn(2, 5), torch.randn(2, 5)
    real = targets.ge(0)

    def both_at_once() -> torch.Tensor:
        return (softmax.sampled_loss(hidden, targets, candidates, logq_t, logq_c, reduction="none") * real).sum()

    def real_positions_only() -> torch.Tensor:
        return sum(softmax.sampled_loss(hidden[d][real[d]], targets[d][real[d]], candidates[d], logq_t[d][real[d]],
                                        logq_c[d], reduction="sum") for d in range(2))

    results = []
    for loss in (both_at_once, real_positions_only):
        softmax.zero_grad()
        value = loss()
        value.backward()
        results.append((value.detach(), softmax.weight.grad.clone(), softmax.bias.grad.clone()))
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-6)
    assert float(results[0][1][20].abs().sum()) == 0.0  # a row no position or negative uses gets no gradient


def test_positions_without_a_target_leave_the_sampled_loss_and_gradients_finite():
    """A -1 target (no next token) must not reach the sampler's expected count: log Q(-1) is NaN, and NaN x 0 would
    poison the loss and the rows of the gradient it touches."""
    from elmo.data.chars import batch_to_ids
    from elmo.training.lm import LanguageModel
    from tests.conftest import micro_train_config

    torch.manual_seed(0)
    config = micro_train_config()
    model = LanguageModel.from_config(config.model, 100)
    ids = batch_to_ids([["a", "b", "c"], ["d", "e", "f"]])  # (2, 3, 50)
    targets = torch.tensor([[5, 6, -1], [7, -1, 8]])
    sampler = LogUniformSampler(100, seed=1)
    samples = [sampler.sample(20) for _ in range(2)]
    losses, _ = model((ids, targets), (ids, targets.flip(1)), model.zero_states(2), samples, sampler)
    sum(losses).backward()
    assert all(torch.isfinite(loss) for loss in losses)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_both_directions_side_by_side_give_each_directions_own_loss_and_states():
    """The language model runs the two directions side by side, positions time-major; each direction's loss,
    final states and gradients equal running its own stack alone over its (B, T) windows."""
    from elmo.data.chars import batch_to_ids
    from elmo.training.lm import LanguageModel
    from tests.conftest import micro_train_config

    torch.manual_seed(3)
    model = LanguageModel.from_config(micro_train_config().model, 100, dropout=0.0).double()
    f_ids = batch_to_ids([["a", "b", "c", "d"], ["e", "f", "g", "h"], ["i", "j", "k", "l"]])  # (3, 4, 50)
    b_ids = batch_to_ids([["m", "n", "o", "p"], ["a", "c", "e", "g"], ["q", "r", "s", "t"]])
    f_targets, b_targets = torch.randint(0, 100, (3, 4)), torch.randint(0, 100, (3, 4))
    states = [[(torch.randn(3, l.projection_dim, dtype=torch.float64), torch.randn(3, l.dim, dtype=torch.float64))
               for _ in range(l.n_layers)] for l in [model.bilm.config.lstm] * 2]
    losses, finals = model((f_ids, f_targets), (b_ids, b_targets), states, None)
    ours = torch.autograd.grad(losses[0] + 2 * losses[1], list(model.parameters()), allow_unused=True)
    alone_losses = []
    for stack, ids, targets, state, final in zip((model.bilm.forward_stack, model.bilm.backward_stack),
                                                 (f_ids, b_ids), (f_targets, b_targets), states, finals):
        outputs, alone_final = stack(model.encode_tokens(ids), [3] * 4, state)  # (B, T, P) batch-major
        top = outputs[-1].reshape(-1, outputs[-1].shape[-1])
        alone_losses.append(model.softmax.full_loss(top, targets.reshape(-1), reduction="none").mean())
        for (h, c), (h_alone, c_alone) in zip(final, alone_final):
            assert torch.allclose(h, h_alone, atol=1e-12) and torch.allclose(c, c_alone, atol=1e-12)
    for a, b in zip(losses, alone_losses):
        assert torch.allclose(a, b, atol=1e-12)
    alone = torch.autograd.grad(alone_losses[0] + 2 * alone_losses[1], list(model.parameters()), allow_unused=True)
    for a, b in zip(ours, alone):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-10))


def test_sample_is_the_first_distinct_ids_in_draw_order():
    """The negatives are the first n distinct ids drawn (TensorFlow's unique sampler), in the order they first
    appeared, and ``tries`` counts the draws up to the n-th of them."""
    sampler = LogUniformSampler(500, seed=4)
    u = torch.rand(2 * 50, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    draws = (torch.exp(u * math.log(501)).long() - 1).clamp(0, 499).tolist()  # the sampler's first 2n draws
    seen: list[int] = []
    for tries, draw in enumerate(draws, start=1):
        if draw not in seen:
            seen.append(draw)
        if len(seen) == 50:
            break
    assert len(seen) == 50  # 100 draws were enough for this seed, so the sampler drew no more
    candidates, sampler_tries = sampler.sample(50)
    assert candidates.tolist() == seen and sampler_tries == tries


def test_row_gradients_sum_each_rows_share_as_the_dense_gradient_does():
    """Two lookups with repeated and shared ids: the collected rows, summed per id, are the dense gradient's rows."""
    torch.manual_seed(0)
    weight = torch.randn(30, 4, requires_grad=True)
    first, second = torch.tensor([3, 7, 3, 0]), torch.tensor([7, 29, 29])
    upstream = [torch.randn(4, 4), torch.randn(3, 4)]
    dense = torch.autograd.grad(sum((weight.index_select(0, i) * g).sum() for i, g in zip((first, second), upstream)),
                                weight)[0]  # (30, 4)
    collector = RowGradients()
    loss = sum((collector.gather(weight, i) * g).sum() for i, g in zip((first, second), upstream))
    loss.backward()
    assert weight.grad is None
    ids, rows = collector.take()
    assert ids.tolist() == [0, 3, 7, 29] and collector.take() is None
    torch.testing.assert_close(rows, dense[ids])
    assert not dense[[i for i in range(30) if i not in ids.tolist()]].any()


def test_clip_with_rows_is_clip_grad_norm_over_the_gradients_and_the_rows():
    """The global norm over the parameters' gradients and the gathered rows, every one scaled as
    ``clip_grad_norm_`` scales them (a clip that fires and one that does not); a non-finite gradient gives a
    non-finite norm."""
    from elmo.training.row_gradients import clip_with_rows

    torch.manual_seed(3)
    for max_norm in (0.5, 1e6):
        params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7)),
                  torch.nn.Parameter(torch.randn(2, 2))]
        for p in params[:2]:
            p.grad = torch.randn_like(p)  # the last one has no gradient
        rows = torch.randn(4, 3)
        expected_grads = [p.grad.clone() for p in params[:2]] + [rows.clone()]
        holders = [torch.nn.Parameter(g.clone()) for g in expected_grads]
        for holder, grad in zip(holders, expected_grads):
            holder.grad = grad
        expected_norm = torch.nn.utils.clip_grad_norm_(holders, max_norm)
        norm = clip_with_rows(params, rows, max_norm)
        torch.testing.assert_close(norm, expected_norm)
        for got, want in zip([p.grad for p in params[:2]] + [rows], [h.grad for h in holders]):
            torch.testing.assert_close(got, want)
        assert (max_norm < 1) == (norm.item() > max_norm)  # the clip fired in one case only
    params[0].grad[0, 0] = float("inf")
    assert not math.isfinite(float(clip_with_rows(params, None, 1.0)))
