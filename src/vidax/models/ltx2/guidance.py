"""LTX-2's guidance, as diffusers 0.42.1's ``LTX2Pipeline.__call__`` runs it, on the predicted
clean latents ``x0 = x - sigma v`` of each stream (video, audio), with separate audio scales:

    x0_g = x0_c + (cfg - 1)(x0_c - x0_uncond) + stg (x0_c - x0_stg) + (mod - 1)(x0_c - x0_iso)

then ``rescale_noise_cfg(x0_g, x0_c, rescale)`` where ``rescale`` > 0, back to a velocity
``(x - x0_g) / sigma`` for the Euler step. The passes:

* ``x0_c`` the prompt's, ``x0_uncond`` the negative prompt's (CFG: ``guidance_scale`` > 1 or
  ``audio_guidance_scale`` > 1);
* ``x0_stg``: the prompt's with the video and audio self-attention of the
  ``spatio_temporal_guidance_blocks`` replaced by their values (STG: ``stg_scale`` > 0 or
  ``audio_stg_scale`` > 0; the reference's default blocks ``[28]``);
* ``x0_iso``: the prompt's with the audio<->video attention off (modality-isolation guidance:
  ``modality_scale`` > 1 or ``audio_modality_scale`` > 1).

A branch that runs for one stream runs for both (its delta then scaled by the other stream's
scale, as the reference). The audio scales fall back to the video ones where None or 0 (the
reference's ``audio_x or x``). Without ``perturbed_attn`` (LTX-2.0) the reference's STG pass is
the prompt's pass again (its blocks do not read the perturbation), so its delta is 0 up to
rounding and vidax does not run it.

vidax runs the passes as one batch of rows ``[prompt, negative (CFG), STG, isolated]`` (each
``B`` samples) with a per-row perturbation mask and cross-modal mask
(:meth:`~vidax.models.ltx2.transformer.LTX2VideoTransformer3DModel.embed`); the reference runs
them as three transformer calls. Same arithmetic per sample.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from vidax.blocks.transformer import block_inputs, static
from vidax.errors import Arg, InputError
from vidax.pipelines.sampling import rescale_noise_cfg

_F32 = jnp.float32
logger = logging.getLogger("vidax.pipeline")

#: diffusers' LTX2Pipeline.__call__ defaults of the guidance keywords.
GUIDANCE_DEFAULTS = dict(
    audio_guidance_scale=7.0,
    stg_scale=1.0,
    audio_stg_scale=1.0,
    modality_scale=3.0,
    audio_modality_scale=3.0,
    guidance_rescale=0.7,
    audio_guidance_rescale=0.7,
    spatio_temporal_guidance_blocks=(28,),
    use_cross_timestep=True,
)


def _or(value: Any, default: float) -> float:
    """diffusers' ``value or default``: None and 0 take the default."""
    return float(value) if value else float(default)


@block_inputs
class LTX2Guidance:
    """The guidance of one call (a pytree: ``scales`` traced, the rest static).

    Attributes:
        scales: ``(2, 4)`` float32, rows video / audio, columns CFG, STG, modality, rescale.
        cfg, stg, modality: static; which of the negative, STG and isolated passes run.
        stg_blocks: static; the STG blocks (``()`` when the STG pass does not run).
        use_cross_timestep: static; the audio<->video attention modulated by the other
            modality's sigma (the reference's default True).
    """

    scales: jax.Array
    cfg: bool = static()
    stg: bool = static()
    modality: bool = static()
    stg_blocks: tuple = static()
    use_cross_timestep: bool = static()

    @property
    def rows(self) -> int:
        """Passes in the batch: the prompt's, then the negative, STG and isolated ones that run."""
        return 1 + self.cfg + self.stg + self.modality

    def masks(self, batch: int) -> tuple[jax.Array | None, jax.Array | None]:
        """``(perturbation_mask, cross_modal_mask)`` ``(rows x batch,)`` float32 of the batch: 0
        on the STG rows / on the isolated rows, 1 elsewhere; None where that pass does not run."""

        def rows_off(row):
            return jnp.ones((self.rows, batch), _F32).at[row].set(0.0).reshape(-1)

        stg = rows_off(1 + self.cfg) if self.stg else None
        iso = rows_off(self.rows - 1) if self.modality else None
        return stg, iso

    def extend(self, x: jax.Array, batch: int) -> jax.Array:
        """The CFG batch's ``x`` (``2B`` rows: prompts, negatives; or ``B``) with the prompts'
        rows again for each STG / isolated pass."""
        extra = self.stg + self.modality
        return jnp.concatenate([x] + [x[:batch]] * extra, axis=0) if extra else x

    def guide(
        self,
        stream: int,
        x: jax.Array,
        pred: jax.Array,
        sigma: jax.Array,
        condition: Callable[[jax.Array], jax.Array] | None = None,
    ) -> jax.Array:
        """The guided velocity of one stream.

        Args:
            stream: 0 video, 1 audio (the row of :attr:`scales`).
            x: the stream's latents ``(B, ...)`` float32.
            pred: the batch's velocities ``(rows x B, ...)`` float32.
            sigma: the step's sigma (scalar).
            condition: applied to the guided x0 before the velocity (a conditioned pipeline
                puts its clean condition latents back there); None: none.

        Returns:
            ``(x - x0_g) / sigma`` ``(B, ...)`` float32.
        """
        s = self.scales[stream]
        x0 = x[None] - pred.reshape((self.rows,) + x.shape) * sigma
        cond = x0[0]
        guided, row = cond, 1
        if self.cfg:
            guided = guided + (s[0] - 1) * (cond - x0[row])
            row += 1
        if self.stg:
            guided = guided + s[1] * (cond - x0[row])
            row += 1
        if self.modality:
            guided = guided + (s[2] - 1) * (cond - x0[row])
        guided = jnp.where(s[3] > 0, rescale_noise_cfg(guided, cond, s[3]), guided)
        if condition is not None:
            guided = condition(guided)
        return (x - guided) / sigma


def call_scales(extra: Mapping[str, Any], guidance_scale: float) -> dict[str, float]:
    """Every scale of a call (``extra``: its keywords) after the reference's fallbacks."""
    d = GUIDANCE_DEFAULTS

    def get(name):
        return extra.get(name, d[name])

    stg, modality = float(get("stg_scale")), float(get("modality_scale"))
    rescale = float(get("guidance_rescale"))
    return dict(
        guidance_scale=float(guidance_scale),
        stg_scale=stg,
        modality_scale=modality,
        guidance_rescale=rescale,
        audio_guidance_scale=_or(get("audio_guidance_scale"), guidance_scale),
        audio_stg_scale=_or(get("audio_stg_scale"), stg),
        audio_modality_scale=_or(get("audio_modality_scale"), modality),
        audio_guidance_rescale=_or(get("audio_guidance_rescale"), rescale),
    )


def does_cfg(extra: Mapping[str, Any], guidance_scale: float) -> bool:
    """The reference's ``do_classifier_free_guidance``: either stream's CFG scale > 1."""
    s = call_scales(extra, guidance_scale)
    return s["guidance_scale"] > 1.0 or s["audio_guidance_scale"] > 1.0


def stg_blocks(extra: Mapping[str, Any]) -> tuple:
    """``spatio_temporal_guidance_blocks`` as a tuple (the reference's default ``(28,)``)."""
    blocks = extra.get("spatio_temporal_guidance_blocks", GUIDANCE_DEFAULTS["spatio_temporal_guidance_blocks"])
    return tuple(blocks or ())


def check_guidance(extra: Mapping[str, Any], guidance_scale: float, num_layers: int, perturbed_attn: bool) -> None:
    """The STG blocks: a list of block indices, not empty while STG runs (the reference's
    check_inputs), in ``[0, num_layers)`` while STG runs on a transformer with
    ``perturbed_attn`` (otherwise the blocks are not read, as in the reference);
    ``use_cross_timestep`` a bool.

    Raises:
        InputError: naming ``spatio_temporal_guidance_blocks=`` or ``use_cross_timestep=``.
    """
    default = GUIDANCE_DEFAULTS["spatio_temporal_guidance_blocks"]
    typed = "spatio_temporal_guidance_blocks" in extra
    given = extra.get("spatio_temporal_guidance_blocks", default)
    arg = Arg("spatio_temporal_guidance_blocks", given)
    s = call_scales(extra, guidance_scale)
    stg = s["stg_scale"] > 0 or s["audio_stg_scale"] > 0
    if given is not None:
        ok = (
            isinstance(given, Sequence)
            and not isinstance(given, str)
            and all(isinstance(i, int) and not isinstance(i, bool) for i in given)
        )
        if ok and not typed and stg and perturbed_attn and any(not 0 <= i < num_layers for i in given):
            raise InputError(
                f"STG (stg_scale, audio_stg_scale > 0) perturbs the reference's default "
                f"spatio_temporal_guidance_blocks {list(default)}, past this transformer's {num_layers} "
                f"blocks [0, {num_layers}); give ",
                Arg("spatio_temporal_guidance_blocks", keyword=True),
                " within them, or ",
                Arg("stg_scale", 0),
                " and ",
                Arg("audio_stg_scale", 0),
                " to turn STG off",
            )
        if not ok or (stg and perturbed_attn and any(not 0 <= i < num_layers for i in given)):
            raise InputError(arg, f" must be a list of transformer block indices in [0, {num_layers})")
    if typed and given and not perturbed_attn:  # the reference takes them and reads them nowhere
        logger.warning(
            "%s is not used: this transformer has no perturbed attention (perturbed_attn, LTX-2.3's), so "
            "its STG pass is the prompt's pass and vidax skips it",
            arg,
        )
    if stg and not given:
        raise InputError(
            arg,
            " is empty while STG runs (stg_scale or audio_stg_scale > 0); give the blocks STG "
            "perturbs, or stg_scale=0 and audio_stg_scale=0",
        )
    flag = extra.get("use_cross_timestep", True)
    if not isinstance(flag, bool):
        raise InputError(Arg("use_cross_timestep", flag), " must be True or False")


def _extra_passes(scales: Mapping[str, float], perturbed_attn: bool) -> tuple[bool, bool]:
    """Whether the STG pass (a transformer with ``perturbed_attn``) and the modality-isolated
    pass run, from :func:`call_scales`."""
    stg = (scales["stg_scale"] > 0 or scales["audio_stg_scale"] > 0) and perturbed_attn
    return bool(stg), scales["modality_scale"] > 1 or scales["audio_modality_scale"] > 1


def guidance_passes(extra: Mapping[str, Any], guidance_scale: float, do_cfg: bool, perturbed_attn: bool) -> int:
    """Transformer passes per sample in one step of a checked call (:attr:`LTX2Guidance.rows`),
    from the call alone (the memory plan's count)."""
    return 1 + bool(do_cfg) + sum(_extra_passes(call_scales(extra, guidance_scale), perturbed_attn))


def call_guidance(extra: Mapping[str, Any], guidance_scale: float, do_cfg: bool, perturbed_attn: bool) -> LTX2Guidance:
    """The :class:`LTX2Guidance` of a checked call (``perturbed_attn``: the transformer's)."""
    s = call_scales(extra, guidance_scale)
    stg, modality = _extra_passes(s, perturbed_attn)
    scales = jnp.asarray(
        [
            [s["guidance_scale"], s["stg_scale"], s["modality_scale"], s["guidance_rescale"]],
            [s["audio_guidance_scale"], s["audio_stg_scale"], s["audio_modality_scale"], s["audio_guidance_rescale"]],
        ],
        _F32,
    )
    return LTX2Guidance(
        scales,
        bool(do_cfg),
        bool(stg),
        bool(modality),
        stg_blocks(extra) if stg else (),
        bool(extra.get("use_cross_timestep", True)),
    )
