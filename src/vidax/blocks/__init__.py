"""Transformer pieces shared by the families' diffusion transformers, configured by data.

* :mod:`vidax.blocks.attention`: :class:`Attention` (one module for self-, cross- and joint
  attention, every family's q/k norm and RoPE layout, GQA, image keys / values, an output gate),
  its :class:`AttentionConfig` and the :class:`AttentionMask` object.
* :mod:`vidax.blocks.modulation`: shift / scale / gate tables and adaptive LayerNorms
  (:class:`AdaLayerNorm`) with the checkpoints' parameter names, and the modulate / gated-add
  arithmetic.

Layering: this package sits between :mod:`vidax.parallel` and :mod:`vidax.models`: it imports
:mod:`vidax.nn` and :mod:`vidax.parallel`, never models, pipelines, weights or the registry.
"""
