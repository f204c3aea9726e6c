"""The shared attention core: the only home of attention layers. Domain packages import from here;
this package imports no domain.

Conventions: boolean masks mean ``True`` = present (attend to it); every layer takes its input width
first and explicit widths after, has ``reset_parameters()`` and ``extra_repr``. Attention layers
(:class:`MultiHeadAttention`, :class:`CrossAttention`) return ``(out, weights or None)``; blocks
return their output, or ``(output, weights)`` with ``need_weights=True``.
"""
from hub.attention.attention_pool import GLOBAL_POOLS, AttentionPool
from hub.attention.cbam import CBAM, ChannelAttention, SpatialAttention, insert_cbam
from hub.attention.cross_attention import CrossAttention, DualCrossAttention, masked_mean
from hub.attention.functional import MultiHeadAttention, attention
from hub.attention.memory_tokens import MemoryTokens
from hub.attention.set_transformer import ISAB, MAB, PMA, SAB, SetTransformer
from hub.attention.slot_attention import SlotAttention
from hub.attention.transformer_block import TransformerBlock

__all__ = [
    "AttentionPool", "GLOBAL_POOLS",
    "CBAM", "ChannelAttention", "SpatialAttention", "insert_cbam",
    "CrossAttention", "DualCrossAttention", "masked_mean",
    "MultiHeadAttention", "attention",
    "MemoryTokens",
    "MAB", "SAB", "ISAB", "PMA", "SetTransformer",
    "SlotAttention",
    "TransformerBlock",
]
