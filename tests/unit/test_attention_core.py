"""The shared attention core: parity with a naive attention, invariances, masks, CBAM insertion, set tasks."""
import math

import pytest
import timm
import torch
import torchvision
from torch import nn

from hub.attention import (
    CBAM,
    ISAB,
    PMA,
    SAB,
    CrossAttention,
    DualCrossAttention,
    MultiHeadAttention,
    SetTransformer,
    SlotAttention,
    TransformerBlock,
    attention,
    insert_cbam,
)
from hub.demos.set_tasks import DeepSets
from hub.testing import assert_overfits, params_without_grad


def naive_attention(q, k, v, mask=None):
    """softmax(q kᵀ / √d) v, written out; ``mask`` True = attend."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


def _mask(lengths, size):
    return torch.arange(size)[None, :] < torch.tensor(lengths)[:, None]  # (B, N)


def _set_models():
    return {"sab": SetTransformer(3, 2, 5, dim_hidden=16, num_heads=2, layer_norm=True),
            "isab": SetTransformer(3, 2, 5, dim_hidden=16, num_heads=2, num_inds=4, layer_norm=True)}


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    """Tiny tensors gain nothing from a second thread, and on a busy machine its waits cost 30x."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


# ---- parity -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("need_weights", [False, True])
def test_attention_matches_naive_float64(need_weights):
    q, k, v = (torch.randn(2, 3, n, 8, dtype=torch.float64) for n in (5, 7, 7))
    mask = _mask([7, 4], 7)[:, None, None, :]  # (B, 1, 1, Lk)
    for m in (None, mask):
        out, weights = attention(q, k, v, m, need_weights=need_weights)
        torch.testing.assert_close(out, naive_attention(q, k, v, m), rtol=0, atol=1e-5)
        assert (weights is not None) == need_weights


def test_multi_head_attention_matches_naive_float64():
    mha = MultiHeadAttention(12, num_heads=3, dim_kv=5).double()
    x, ctx = torch.randn(2, 4, 12, dtype=torch.float64), torch.randn(2, 6, 5, dtype=torch.float64)
    key_mask = _mask([6, 2], 6)
    out, weights = mha(x, ctx, key_mask, need_weights=True)
    heads = lambda t: t.view(2, -1, 3, 4).transpose(1, 2)  # noqa: E731  (B, L, 12) -> (B, 3, L, 4)
    expected = naive_attention(heads(mha.q_proj(x)), heads(mha.k_proj(ctx)), heads(mha.v_proj(ctx)),
                               key_mask[:, None, None, :])
    expected = mha.out_proj(expected.transpose(1, 2).reshape(2, 4, 12))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(mha(x, ctx, key_mask)[0], expected, rtol=0, atol=1e-5)  # the SDPA path
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4, dtype=torch.float64))
    assert weights[1, :, :, 2:].abs().max() == 0
    allowed = torch.rand(1, 1, 4, 6) > 0.5  # an (Lq, Lk) pattern, e.g. an adjacency, combined with key_mask
    allowed[..., 0, :] = False  # a query row with nowhere to attend
    masked = naive_attention(heads(mha.q_proj(x)), heads(mha.k_proj(ctx)), heads(mha.v_proj(ctx)),
                             key_mask[:, None, None, :] & allowed).nan_to_num()
    masked = mha.out_proj(masked.transpose(1, 2).reshape(2, 4, 12))
    torch.testing.assert_close(mha(x, ctx, key_mask, attn_mask=allowed)[0], masked, rtol=0, atol=1e-5)


def test_fully_masked_rows_and_empty_keys_are_finite():
    q = torch.randn(2, 1, 3, 4)
    mask = torch.zeros(2, 1, 1, 5, dtype=torch.bool)
    mask[0, ..., :2] = True
    for need_weights in (False, True):
        out, _ = attention(q, torch.randn(2, 1, 5, 4), torch.randn(2, 1, 5, 4), mask, need_weights=need_weights)
        assert torch.isfinite(out).all() and out[1].abs().max() == 0
        empty, _ = attention(q, torch.randn(2, 1, 0, 4), torch.randn(2, 1, 0, 4), need_weights=need_weights)
        assert empty.shape == (2, 1, 3, 4) and empty.abs().max() == 0


# ---- Set Transformer --------------------------------------------------------------------------------

def test_set_transformer_shapes_and_gradients():
    x, mask = torch.randn(3, 9, 3), _mask([9, 5, 1], 9)
    for model in _set_models().values():
        out = model(x, mask)
        assert out.shape == (3, 2, 5)
        out.square().sum().backward()
        assert not params_without_grad(model)
    assert PMA(16, num_seeds=3, num_heads=4)(torch.randn(2, 7, 16)).shape == (2, 3, 16)


def test_sab_isab_equivariant_pma_set_transformer_invariant():
    x, perm = torch.randn(2, 10, 16), torch.randperm(10)
    for block in (SAB(16, 16, num_heads=4), ISAB(16, 16, num_heads=4, num_inds=3)):
        torch.testing.assert_close(block(x[:, perm]), block(x)[:, perm], rtol=1e-5, atol=1e-5)
    pma = PMA(16, num_seeds=2, num_heads=4)
    torch.testing.assert_close(pma(x[:, perm]), pma(x), rtol=1e-5, atol=1e-5)
    x3 = torch.randn(2, 10, 3)
    for model in _set_models().values():
        torch.testing.assert_close(model(x3[:, perm]), model(x3), rtol=1e-5, atol=1e-5)


def test_set_transformer_padding_changes_nothing_and_empty_set_is_finite():
    x, mask = torch.randn(3, 8, 3), _mask([8, 5, 0], 8)
    noisy = x.clone()
    noisy[~mask] = 1e3 * torch.randn(int((~mask).sum()), 3)
    for model in _set_models().values():
        out = model(x, mask)
        torch.testing.assert_close(model(noisy, mask), out)
        torch.testing.assert_close(model(x[1:2, :5]), out[1:2], rtol=1e-5, atol=1e-5)  # the unpadded set
        assert torch.isfinite(out).all()
        assert torch.isfinite(model(x[:, :0], mask[:, :0])).all()  # zero-length sets


# ---- Slot Attention ---------------------------------------------------------------------------------

def _slots(module, inputs, mask=None):
    return module(inputs, mask, generator=torch.Generator().manual_seed(3))


def test_slot_attention_shapes_gradients_and_masks():
    module = SlotAttention(8, num_slots=3, dim_slot=16, dim_hidden=32)
    slots, attn = _slots(module, torch.randn(2, 20, 8))
    assert slots.shape == (2, 3, 16) and attn.shape == (2, 3, 20)
    torch.testing.assert_close(attn.sum(1), torch.ones(2, 20))  # softmax over the slots
    slots.square().sum().backward()
    assert not params_without_grad(module)
    assert _slots(module, torch.randn(2, 20, 8))[0].shape == (2, 3, 16)
    assert module(torch.randn(2, 20, 8), num_slots=5)[0].shape == (2, 5, 16)


def test_slot_attention_permutation_and_padding():
    module = SlotAttention(8, num_slots=4, dim_slot=16)
    x, perm = torch.randn(2, 12, 8), torch.randperm(12)
    slots, attn = _slots(module, x)
    slots_p, attn_p = _slots(module, x[:, perm])
    torch.testing.assert_close(slots_p, slots, rtol=1e-5, atol=1e-5)  # the slot set, same fixed noise
    torch.testing.assert_close(attn_p, attn[:, :, perm], rtol=1e-5, atol=1e-5)  # masks follow the inputs
    mask = _mask([12, 7], 12)
    noisy = x.clone()
    noisy[~mask] = 50 * torch.randn(int((~mask).sum()), 8)
    slots_m, attn_m = _slots(module, x, mask)
    torch.testing.assert_close(_slots(module, noisy, mask)[0], slots_m)
    torch.testing.assert_close(slots_m[1], _slots(module, x[:, :7])[0][1], rtol=1e-5, atol=1e-5)  # unpadded
    assert attn_m[1, :, 7:].abs().max() == 0
    empty_slots, _ = _slots(module, x, torch.zeros(2, 12, dtype=torch.bool))
    assert torch.isfinite(empty_slots).all()


def test_slot_attention_implicit_grad_detaches_the_start():
    module = SlotAttention(8, num_slots=3, dim_slot=16, implicit_grad=True)
    _slots(module, torch.randn(2, 10, 8))[0].sum().backward()
    assert module.slots_mu.grad is None and module.gru.weight_ih.grad.abs().sum() > 0


# ---- cross-attention --------------------------------------------------------------------------------

def test_cross_attention_shapes_weights_and_missing_context():
    layer = CrossAttention(16, dim_context=8, num_heads=4)
    x, ctx = torch.randn(3, 5, 16), torch.randn(3, 7, 8)
    ctx_mask = _mask([7, 3, 0], 7)  # the third sample has no context
    out, weights = layer(x, ctx, ctx_mask, need_weights=True)
    assert out.shape == (3, 5, 16) and weights.shape == (3, 4, 5, 7)
    assert torch.isfinite(out).all() and weights[2].abs().max() == 0
    torch.testing.assert_close(layer(x, ctx, ctx_mask)[0], out, rtol=1e-5, atol=1e-5)  # SDPA path, same math
    other = layer(x, 1e3 * torch.randn(3, 7, 8), ctx_mask)[0]
    torch.testing.assert_close(other[2], out[2])  # absent context: B's values do not matter
    torch.testing.assert_close(layer(x[2:], ctx[2:, :0])[0], out[2:])  # same as a zero-length context


@pytest.mark.parametrize("fusion", ["concat", "gate"])
def test_dual_cross_attention_missing_modality_and_gradients(fusion):
    fuse = DualCrossAttention(12, 6, dim=16, num_heads=4, fusion=fusion)
    a, b = torch.randn(3, 9, 12), torch.randn(3, 4, 6)
    a_mask, b_mask = _mask([9, 9, 0], 9), _mask([4, 0, 2], 4)  # sample 1 lacks B, sample 2 lacks A
    out, weights = fuse(a, b, a_mask, b_mask, need_weights=True)
    assert out.shape == (3, fuse.num_features) and torch.isfinite(out).all()
    assert weights["a_to_b"].shape == (3, 4, 9, 4) and weights["b_to_a"].shape == (3, 4, 4, 9)
    changed_b = fuse(a, b + 100 * torch.randn_like(b), a_mask, b_mask)
    torch.testing.assert_close(changed_b[1], out[1])  # B absent: B's values change nothing
    out.square().sum().backward()
    assert not params_without_grad(fuse)


# ---- CBAM -------------------------------------------------------------------------------------------

def test_cbam_maps_in_unit_interval_and_gradients():
    module = CBAM(32, reduction=8)
    out, (channel_map, spatial_map) = module(5 * torch.randn(2, 32, 6, 6), need_weights=True)
    assert out.shape == (2, 32, 6, 6) and channel_map.shape == (2, 32, 1, 1) and spatial_map.shape == (2, 1, 6, 6)
    for m in (channel_map, spatial_map):
        assert m.min() >= 0 and m.max() <= 1
    out.sum().backward()
    assert not params_without_grad(module)


@pytest.mark.parametrize("make", [lambda: torchvision.models.resnet18(num_classes=3),
                                  lambda: timm.create_model("resnet18", num_classes=3),
                                  lambda: torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck,
                                                                           [1, 1, 1, 1], num_classes=3)],
                         ids=["torchvision_resnet18", "timm_resnet18", "torchvision_bottleneck"])
def test_insert_cbam_into_every_residual_block(make):
    model = make()
    blocks = [m for m in model.modules() if type(m).__name__ in ("BasicBlock", "Bottleneck")]
    insert_cbam(model, reduction=16)
    assert sum(isinstance(m, CBAM) for m in model.modules()) == len(blocks) > 0
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)
    with pytest.raises(TypeError, match="inserted already"):
        insert_cbam(model)
    with pytest.raises(TypeError, match="ResNet"):
        insert_cbam(nn.Linear(2, 2))


# ---- learning ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sab", "isab", "deep_sets"])
def test_set_models_overfit_eight_sets(name):
    model = _set_models()[name] if name != "deep_sets" else DeepSets(3, 2, 5, dim_hidden=32)
    x, mask = torch.randn(8, 6, 3), _mask([6, 5, 4, 3, 6, 2, 1, 6], 6)
    target = torch.randn(8, 2, 5)
    assert_overfits(model, lambda: (model(x, mask) - target).square().mean(), steps=80, lr=1e-2)


def test_attention_pool_is_class_attention_and_ignores_token_order():
    """AttentionPool against the paper's learned aggregation written out (the class token's query over [class token,
    tokens], residual, MLP, LayerNorm); the pooled vector is unchanged when the tokens are permuted."""
    from hub.attention import AttentionPool

    torch.manual_seed(0)
    pool = AttentionPool(8, num_heads=2).eval()
    tokens = torch.randn(3, 5, 8)
    block, mha = pool.block, pool.block.attn
    cls = pool.cls_token.expand(3, -1, -1)
    context = block.norm_context(torch.cat([cls, tokens], 1))

    def heads(x):
        return x.view(3, x.shape[1], 2, 4).transpose(1, 2)

    attended = naive_attention(heads(mha.q_proj(block.norm_query(cls))), heads(mha.k_proj(context)),
                               heads(mha.v_proj(context)))
    x = cls + mha.out_proj(attended.transpose(1, 2).reshape(3, 1, 8))
    expected = pool.norm((x + block.mlp(x))[:, 0])
    torch.testing.assert_close(pool(tokens), expected, rtol=0, atol=1e-5)
    pooled, weights = pool(tokens, need_weights=True)
    assert weights.shape == (3, 2, 1, 6) and torch.allclose(weights.sum(-1), torch.ones(3, 2, 1))
    torch.testing.assert_close(pool(tokens[:, torch.randperm(5)]), pooled, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["vit_micro_patch4_32", "cct_2_3x2_32"])
def test_memory_tokens_leave_the_source_task_bit_identical(family):
    """Sandler et al.'s masked extension: the source logits stay the frozen model's bit for bit while the new task
    trains; the new task's token equals the last row of the blocks run on [source tokens, memory, new token] with the
    source rows masked off the memory and the new token (the paper's mask, written out with timm's own attn_mask);
    only the memory, the new token and the new head learn."""
    import hub
    from hub.attention.memory_tokens import MemoryTokens
    from hub.testing import params_without_grad

    torch.manual_seed(0)
    source = hub.create_model(family, num_classes=10).eval()
    x, y = torch.randn(3, 3, 32, 32), torch.tensor([0, 1, 3])
    extended = MemoryTokens(source, num_classes=4, tokens_per_layer=3)
    with torch.no_grad():  # the source task as served
        before = source(x)
        new_before = extended(x)

    inputs = []
    hooks = [b.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for b in source.blocks]
    with torch.no_grad():
        source(x)
        token = extended.cls_token.expand(3, -1, -1)
        for block, tokens, memory in zip(source.blocks, inputs, extended.memory):
            n = tokens.shape[1]
            sequence = torch.cat([tokens, memory.expand(3, -1, -1), token], 1)
            allowed = torch.ones(sequence.shape[1], sequence.shape[1], dtype=torch.bool)
            allowed[:n, n:] = False  # source rows see the source tokens only
            out = block(sequence, attn_mask=torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf")))
            torch.testing.assert_close(out[:, :n], block(tokens), rtol=0, atol=1e-5)  # the mask keeps the source path
            token = out[:, -1:]
    for hook in hooks:
        hook.remove()
    torch.testing.assert_close(extended.head(source.norm(token)[:, 0]), new_before, rtol=0, atol=1e-5)

    optimizer = torch.optim.Adam([p for p in extended.parameters() if p.requires_grad], lr=1e-2)
    extended.train()
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(extended(x), y).backward()
        optimizer.step()
    trained = {n for n, p in extended.named_parameters() if p.requires_grad}
    assert trained == {"memory", "cls_token", "head.weight", "head.bias"} and not params_without_grad(extended)
    with torch.no_grad():
        after, new_after = extended.eval().forward_both(x)
    assert torch.equal(after, before), "a source logit changed while the new task trained"
    assert not torch.allclose(new_after, new_before)  # the new task did train


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_block_computes_its_formula_with_masks_and_gradients(norm_first):
    """Post-norm ``LN(x + MHA(x))``, ``LN(x + FFN(x))`` (TabTransformer) or pre-norm ``x + MHA(LN(x))``,
    ``x + FFN(LN(x))`` (CARTE), written out (float64, eval); a masked key changes no output; permuting the
    tokens permutes the outputs; every parameter gets a gradient."""
    torch.manual_seed(0)
    block = TransformerBlock(16, num_heads=4, dropout=0.1, ffn_ratio=2, norm_first=norm_first).double().eval()
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    present = torch.ones(3, 6, dtype=torch.bool)
    present[:, -1] = False
    if norm_first:
        h = x + block.attn(block.norm1(x), key_mask=present)[0]
        expected = h + block.ffn(block.norm2(h))
    else:
        h = block.norm1(x + block.attn(x, key_mask=present)[0])
        expected = block.norm2(h + block.ffn(h))
    out = block(x, key_mask=present)
    torch.testing.assert_close(out, expected)
    changed = x.clone()
    changed[:, -1] += 5.0  # the masked token's value reaches no other token
    torch.testing.assert_close(block(changed, key_mask=present)[:, :-1], out[:, :-1])
    order = torch.randperm(6)
    torch.testing.assert_close(block(x[:, order]), block(x)[:, order])
    block.train()
    block(x, key_mask=present).sum().backward()
    assert params_without_grad(block) == []

