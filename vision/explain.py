"""Explanations as maps over the input image, by the family's own attention where it has some:

- attention rollout for ViTs (Abnar & Zuidema, ACL 2020; in :mod:`hub.explain`); for CCT, which has no class token
  and pools its tokens by attention (timm's ``global_pool="map"``), that pooling's attention over the tokens, which
  is what the classifier reads (the rollout's mean row kept a rank correlation of 0.5 with random weights on
  generated images: a residual-dominated rollout over a convolutional tokenizer follows the image; the pooling's
  weights 0.08);
- CoaT's factorised attention: the class token's weight on each patch, ``q_cls . softmax_N(k)_n``, in every block of
  every stage (CoaT never forms the N x N matrix; its output is ``q softmax(k)^T v``, so that product is the weight
  patch n gets), averaged over heads and blocks;
- CBAM's spatial map of the last block of a CBAM ResNet and of airbench-CBAM (where CBAM closes the block; a ResNet
  with attention pooling: the pooling's map). The earlier blocks' maps follow the input's edges more than what the
  model learned: with random weights they keep a Spearman rank correlation of 0.8-0.9 with the trained model's
  (airbench-CBAM's first block, ResNet-CBAM micro's second, on generated images), failing the randomisation test,
  where the last block's falls to -0.2 to -0.4;
- halo attention (HaloNet, airbench-halo): the attention each pixel receives from the queries of the blocks whose
  halo window holds it, in every attention layer;
- otherwise, and for ``--target CLASS`` (the maps above are the same for every class), Integrated Gradients from
  Captum (:func:`hub.explain.integrated_gradients`).

Slot autoencoders are explained by their slots: the figure of scene, reconstruction and slots' masks.

>>> model = hub.load("vit_digits.sklearn")
>>> image_explanation(model, torch.zeros(1, 1, 8, 8)).values.shape
(8, 8)
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from timm.layers import AttentionPoolLatent
from timm.layers.halo_attn import HaloAttn
from timm.models.coat import CoaT, FactorAttnConvRelPosEnc
from timm.models.vision_transformer import VisionTransformer

from hub.attention import AttentionPool
from hub.attention.cbam import CBAM
from hub.explain import Explanation, attention_rollout, class_target, integrated_gradients, scaled, vit_attention
from hub.plotting import save_figure
from vision.io import read_image
from vision.models.residual_attention import AttentionModule

IG_METHOD = "Integrated Gradients (Captum)"


def _captured(model: torch.nn.Module, kind: type, hook, x: torch.Tensor, head: bool = False) -> list[torch.Tensor]:
    """Run ``model.forward_features(x)`` (and with ``head`` its ``forward_head``: no test-time augmentation) with
    ``hook(module, args) -> (B, 1, h, w)`` on every ``kind`` module; the maps it returned, in the order of the
    modules."""
    found: list[torch.Tensor] = []
    handles = [m.register_forward_hook(lambda m, args, out: found.append(hook(m, args)))
               for m in model.modules() if isinstance(m, kind)]
    try:
        with torch.no_grad():
            features = model.forward_features(x)
            if head:
                model.forward_head(features)
    finally:
        for handle in handles:
            handle.remove()
    return found


def _pool_weights(module: AttentionPool, args) -> torch.Tensor:
    """The class token's attention on each position of the map an attention pool reads, mean over heads.
    Shapes: features (B, C, h, w) -> (B, 1, h, w)."""
    features = args[0]
    _, weights = module.forward(features, need_weights=True)  # (B, heads, 1, 1 + h * w); .forward: no hook again
    return weights.mean(1)[:, :, 1:].reshape(len(features), 1, *features.shape[-2:])


def _coat_weights(module: FactorAttnConvRelPosEnc, args) -> torch.Tensor:
    """The class token's factorised attention weight on each patch. Shapes: tokens (B, 1 + h*w, C) -> (B, 1, h, w)."""
    tokens, size = args
    batch, count, channels = tokens.shape
    qkv = module.qkv(tokens).reshape(batch, count, 3, module.num_heads, channels // module.num_heads)
    q, k = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)  # (B, heads, N, Ch)
    weights = q[:, :, :1] @ k.softmax(dim=2).transpose(-1, -2)  # (B, heads, 1, N)
    return weights[:, :, 0, 1:].abs().mean(1).reshape(batch, 1, *size)


def _halo_received(module: HaloAttn, args) -> torch.Tensor:
    """The attention each pixel receives, averaged over heads and over the queries whose window holds it, computed
    as timm's ``HaloAttn.forward`` computes it (its softmax is not a module a hook can read).

    Shapes: x (B, C, H, W) -> (B, 1, H, W)."""
    x = args[0]
    height, width = x.shape[-2:]
    block, halo, win = module.block_size, module.halo_size, module.win_size
    x = F.pad(x, (0, -width % block, 0, -height % block))  # as PaddedHaloAttn; nothing for HaloNet's own maps
    batch, _, padded_h, padded_w = x.shape
    rows, cols = padded_h // block, padded_w // block
    q = module.q(x).reshape(-1, module.dim_head_qk, rows, module.block_size_ds, cols, module.block_size_ds)
    q = q.permute(0, 1, 3, 5, 2, 4).reshape(batch * module.num_heads, module.dim_head_qk, -1, rows * cols)
    q = q.transpose(1, 3)  # (B * heads, blocks, queries, Ch)
    kv = F.pad(module.kv(x), [halo] * 4).unfold(2, win, block).unfold(3, win, block)
    kv = kv.reshape(batch * module.num_heads, module.dim_head_qk + module.dim_head_v, rows * cols, -1)
    k = kv.permute(0, 2, 3, 1)[..., :module.dim_head_qk]  # (B * heads, blocks, win * win, Ch)
    logits = q @ k.transpose(-1, -2)
    logits = ((logits + module.pos_embed(q)) * module.scale if module.scale_pos_embed
              else logits * module.scale + module.pos_embed(q))
    received = logits.softmax(-1).sum(2).reshape(batch, module.num_heads, rows * cols, win * win).mean(1)
    plane_size = (padded_h + 2 * halo, padded_w + 2 * halo)
    plane = F.fold(received.transpose(1, 2), plane_size, kernel_size=win, stride=block)  # (B, 1, H + 2h, W + 2h)
    cover = F.fold(torch.full_like(received[:1], float(q.shape[2])).transpose(1, 2), plane_size, kernel_size=win,
                   stride=block)
    return (plane / cover.clamp_min(1))[..., halo:halo + height, halo:halo + width]


def _latent_pool_weights(model: VisionTransformer, x: torch.Tensor) -> torch.Tensor:
    """The attention of timm's latent pooling query (CCT: ``global_pool="map"``) over the tokens, mean over heads and
    latents, as ``AttentionPoolLatent.forward`` computes it. Shapes: x (B, C, H, W) -> (B, N)."""
    found: list[torch.Tensor] = []

    def weights(module: AttentionPoolLatent, args, out) -> None:
        tokens = args[0]
        batch, count, _ = tokens.shape
        if module.pos_embed is not None:
            tokens = tokens + module.pos_embed.unsqueeze(0).to(tokens.dtype)
        q = module.q(module.latent.expand(batch, -1, -1)).reshape(batch, module.latent_len, module.num_heads,
                                                                   module.head_dim).transpose(1, 2)
        k = module.kv(tokens).reshape(batch, count, 2, module.num_heads, module.head_dim).permute(2, 0, 3, 1, 4)[0]
        q, k = module.q_norm(q), module.k_norm(k)
        found.append(((q * module.scale) @ k.transpose(-2, -1)).softmax(-1).mean((1, 2)))  # (B, N)

    handle = model.attn_pool.register_forward_hook(weights)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return found[0]


def _cbam_maps(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    if hasattr(model, "attention_maps"):  # airbench-CBAM: its blocks' maps
        with torch.no_grad():
            return list(model.attention_maps(x).values())
    from vision.models.resnet_cbam import attention_maps

    with torch.no_grad():
        return list(attention_maps(model, x).values())


def attention_map(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, str] | None:
    """The family's own attention as a map over the image, and the method's name; None for a family without one.

    Shapes: x: (B, C, H, W) -> (B, H, W) in [0, 1].
    """
    if isinstance(model, VisionTransformer) and isinstance(model.attn_pool, AttentionPoolLatent):
        pooled = _latent_pool_weights(model, x)[:, model.num_prefix_tokens:]  # (B, patches)
        found = [pooled.reshape(-1, 1, *model.patch_embed.grid_size)]
        method = "attention of the pooling query over the tokens (what the classifier reads)"
    elif isinstance(model, VisionTransformer):
        maps = attention_rollout(vit_attention(model, x), model.num_prefix_tokens, tuple(model.patch_embed.grid_size))
        found, method = [maps.unsqueeze(1)], "attention rollout over all blocks"
    elif isinstance(model, CoaT):
        found = _captured(model, FactorAttnConvRelPosEnc, _coat_weights, x)
        method = f"CoaT factorised attention of the class token, mean of {len(found)} blocks"
    elif any(isinstance(m, AttentionPool) for m in model.modules()):  # what the classifier reads, over CBAM's
        found = _captured(model, AttentionPool, _pool_weights, x, head=True)
        method = "learned aggregation: the class token's attention over the last map (what the classifier reads)"
    elif any(isinstance(m, CBAM) for m in model.modules()):
        found = _cbam_maps(model, x)[-1:]
        method = "CBAM spatial attention of the last block (the earlier blocks' follow the input's edges)"
    elif any(isinstance(m, HaloAttn) for m in model.modules()):
        found = _captured(model, HaloAttn, _halo_received, x)
        method = f"halo attention received per pixel, mean of {len(found)} layers"
    elif any(isinstance(m, AttentionModule) and m.mask is not None for m in model.modules()):
        with torch.no_grad():
            found = list(model.attention_maps(x).values())[-1:]
        method = "soft mask of the last attention module (residual attention; mean over channels)"
    else:
        return None
    maps = [scaled(F.interpolate(m.float(), size=x.shape[-2:], mode="bilinear")[:, 0]) for m in found]
    return scaled(torch.stack(maps).mean(0)), method


def image_explanation(model: torch.nn.Module, x: torch.Tensor, target: int | None = None) -> Explanation:
    """What decided the class of one image: the family's attention (:func:`attention_map`) for the top class;
    Integrated Gradients (summed over channels) for a class asked by ``target`` or a family without attention.

    Shapes: x: (1, C, H, W) -> values (H, W) in [0, 1].
    """
    model.eval()
    with torch.no_grad():
        chosen, probability = class_target(model(x), target)
    found = None if target is not None else attention_map(model, x)
    if found is None:
        maps = scaled(integrated_gradients(model, (x,), chosen)[0].abs().sum(1))
        reason = ("for the class asked; the attention maps are the same for every class" if target is not None
                  else f"{type(model).__name__} has no attention map to read")
        found = maps, f"{IG_METHOD}: {reason}"
    maps, method = found
    return Explanation(maps[0].numpy(), method, chosen, probability, axes=("height", "width"))


def save_overlay(image: torch.Tensor, heatmap: torch.Tensor | np.ndarray, path: str | Path, title: str = "") -> None:
    """Draw ``heatmap`` (H, W) in [0, 1] over ``image`` (C, H, W, any range) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = image.float()
    shown = (shown - shown.min()) / (shown.max() - shown.min()).clamp_min(1e-12)
    fig, axes = plt.subplots(1, 2, figsize=(5, 2.8))
    picture = shown[0] if shown.shape[0] == 1 else shown.permute(1, 2, 0)
    axes[0].imshow(picture, cmap="gray" if shown.shape[0] == 1 else None)
    axes[1].imshow(picture, cmap="gray" if shown.shape[0] == 1 else None)
    axes[1].imshow(heatmap, cmap="jet", alpha=0.5, vmin=0, vmax=1)
    for ax in axes:
        ax.axis("off")
    fig.suptitle(title, fontsize=7)
    save_figure(fig, path, dpi=100, bbox_inches="tight")


def image_samples(card, inputs: list[str], prefix: str = "test") -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """``(name, {"x": (1, C, H, W)})`` of each image file; without files, the first four images of the card's test
    split, named ``{prefix}I``."""
    if inputs:
        for file in inputs:
            yield Path(file).stem, {"x": read_image(file, card.input_spec)[None]}
        return
    from hub.run.evaluate import card_data

    test_set = card_data(card).test_set
    for i in range(min(4, len(test_set))):
        yield f"{prefix}{i}", {"x": test_set[i][0][None]}


def scene_samples(card, inputs: list[str]) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """:func:`image_samples` of a slot autoencoder's card: without files, its first four test scenes (``sceneI``)."""
    return image_samples(card, inputs, prefix="scene")


def scene_explanation(model: torch.nn.Module, x: torch.Tensor) -> Explanation:
    """A slot autoencoder's slots for one scene: values are the slots' masks (K, H, W); ``extra`` holds the
    autoencoder's output (reconstruction, slot images) for the figure."""
    model.eval()
    with torch.no_grad():
        out = model.autoencode(x, generator=torch.Generator().manual_seed(0))
    out = {k: v[0] for k, v in out.items()}
    return Explanation(out["masks"].numpy(), "slot attention masks (one per slot)", axes=("slot", "height", "width"),
                       extra=out)


def _shown(image: torch.Tensor) -> np.ndarray:
    return ((image.detach().float().clamp(-1, 1) + 1) / 2).permute(1, 2, 0).cpu().numpy()


def save_slot_figure(image: torch.Tensor, out: dict[str, torch.Tensor], path: str | Path, title: str = "") -> None:
    """Scene, reconstruction, segmentation (argmax of the masks) and each slot's image times its mask, for
    one item of ``model.autoencode``'s output (``out`` with the batch dimension removed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    masks = out["masks"]  # (K, H, W)
    num_slots = masks.shape[0]
    fig, axes = plt.subplots(1, 3 + num_slots, figsize=(1.6 * (3 + num_slots), 2.0))
    axes[0].imshow(_shown(image))
    axes[0].set_title("scene", fontsize=7)
    axes[1].imshow(_shown(out["recon"]))
    axes[1].set_title("reconstruction", fontsize=7)
    axes[2].imshow(masks.argmax(0).cpu().numpy(), cmap="tab10", vmin=0, vmax=9, interpolation="nearest")
    axes[2].set_title("segments", fontsize=7)
    white = torch.ones_like(image)
    for k in range(num_slots):
        mask = masks[k].unsqueeze(0)
        axes[3 + k].imshow(_shown(out["slot_images"][k] * mask + white * (1 - mask)))
        axes[3 + k].set_title(f"slot {k} ({float(mask.mean()):.0%})", fontsize=7)
    for ax in axes:
        ax.axis("off")
    fig.suptitle(title, fontsize=8)
    save_figure(fig, path, dpi=110, bbox_inches="tight")
