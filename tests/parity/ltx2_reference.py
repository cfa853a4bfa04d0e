"""Tiny LTX-2 transformer and connectors configs (distinct sizes for the two streams), shared by
the parity tests and ``tests/test_contracts.py``.

Transformer: video 4 heads of 10 (D = 40: the video table has 40 // 6 = 6 frequencies per axis
and 2 unrotated pairs at the front, and its pairs straddle the 4 heads), audio 8 heads of 2
(D_a = 16); the audio<->video attention runs 8 heads of 2 while the reference cuts the video
side's "split" table into the 4 video heads (chunks of 4 channels): a per-head table would fail.
in 6 / out 9 video channels, in 5 / out 7 audio channels, caption width 20, 3 blocks (STG on
block 1 of them). Heads 4 and 8 split over tensor 2 x sequence 2.

Connectors: Gemma width 12 x 3 hidden states; 2.0: video 3 heads of 4, audio 2 heads of 6 (both
12 wide, the projection's width); 2.3: video 5 heads of 4 (20), audio 7 heads of 2 (14).
"""

from __future__ import annotations

TRANSFORMER_20 = dict(
    in_channels=6,
    out_channels=9,
    num_attention_heads=4,
    attention_head_dim=10,
    cross_attention_dim=40,
    audio_in_channels=5,
    audio_out_channels=7,
    audio_num_attention_heads=8,
    audio_attention_head_dim=2,
    audio_cross_attention_dim=16,
    num_layers=3,
    caption_channels=20,
    rope_type="split",
)
#: LTX-2.3's layers: gated attention, cross-attention AdaLN (prompt AdaLN), perturbed attention,
#: the connectors' widths as text input.
TRANSFORMER_23 = dict(
    TRANSFORMER_20,
    gated_attn=True,
    audio_gated_attn=True,
    cross_attn_mod=True,
    audio_cross_attn_mod=True,
    perturbed_attn=True,
    use_prompt_embeddings=False,
)
#: LTX-2.5's on top: no video FFN bias, the keyframe embedding, a static prompt table.
TRANSFORMER_25 = dict(
    TRANSFORMER_23, ff_bias=False, use_keyframes_abs_pos_embedding=True, use_prompt_adaln_single=False
)
#: The "split" RoPE of every release; the "interleaved" layout's tables are checked at full width
#: (tests/parity/test_ltx2_transformer.py) and its rotation by the shared attention's tests.
TRANSFORMERS = {"2.0": TRANSFORMER_20, "2.3": TRANSFORMER_23, "2.5": TRANSFORMER_25}

CONNECTORS_20 = dict(
    caption_channels=12,
    text_proj_in_factor=3,
    video_connector_num_attention_heads=3,
    video_connector_attention_head_dim=4,
    video_connector_num_layers=2,
    video_connector_num_learnable_registers=4,
    audio_connector_num_attention_heads=2,
    audio_connector_attention_head_dim=6,
    audio_connector_num_layers=1,
    audio_connector_num_learnable_registers=4,
    rope_type="split",
)
CONNECTORS_23 = dict(
    CONNECTORS_20,
    per_modality_projections=True,
    video_hidden_dim=20,
    audio_hidden_dim=14,
    proj_bias=True,
    video_gated_attn=True,
    audio_gated_attn=True,
    video_connector_num_attention_heads=5,
    audio_connector_num_attention_heads=7,
    audio_connector_attention_head_dim=2,
)
