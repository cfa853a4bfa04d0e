"""The keywords of diffusers' pipeline ``__call__`` that vidax refuses, each with its reason and
what vidax takes instead: the one list the table of docs/diffusers.md ("Refused keywords") is checked
against (``tests/test_diffusers_keywords.py``) and the error of a call passing one quotes.

Every other keyword of the ``__call__`` of the diffusers 0.42.1 pipeline classes vidax runs
(model_index.json's ``_class_name``, :mod:`vidax.registry`) is taken by the vidax pipeline with
diffusers' meaning (its ``call_args()``). :data:`REFUSED_VALUES` lists the values of taken
keywords vidax refuses (a keyword taken for its default only).
"""

from __future__ import annotations

import dataclasses

from vidax.io.image import FLOAT_ARRAY_REASON

#: Marks a :class:`Refused` entry that holds for every pipeline class whose ``__call__`` has it.
EVERY = ("*",)


@dataclasses.dataclass(frozen=True)
class Refused:
    """A diffusers ``__call__`` keyword vidax does not take.

    Attributes:
        keyword: diffusers' keyword. pipelines: the diffusers pipeline classes it is refused for
        (:data:`EVERY`: all of them). reason: why, in one sentence. instead: vidax's spelling of
        what it does (empty: none).
    """

    keyword: str
    pipelines: tuple[str, ...]
    reason: str
    instead: str = ""

    def applies(self, pipeline: str) -> bool:
        return self.pipelines == EVERY or pipeline in self.pipelines

    def message(self) -> str:
        """``"<reason>; vidax takes <instead>"``: what the error of a call passing it says."""
        return self.reason + (f"; vidax takes {self.instead}" if self.instead else "")


_LTX_TIMESTEPS = (
    "LTXPipeline",
    "LTXImageToVideoPipeline",
    "LTX2Pipeline",
    "LTX2ImageToVideoPipeline",
    "LTX2ConditionPipeline",
)

#: The refused keywords, by diffusers' keyword.
REFUSED: tuple[Refused, ...] = (
    Refused(
        "generator",
        EVERY,
        "vidax draws its noise with jax.random from an integer seed: a torch.Generator's "
        "stream cannot be reproduced without torch (generator=None, diffusers' 'draw at random', is taken)",
        "seed=<int in [0, 2**32 - 1]>",
    ),
    Refused(
        "timesteps",
        ("CogVideoXPipeline", "CogVideoXImageToVideoPipeline"),
        "diffusers 0.42.1 raises for any value: its CogVideoX schedulers' set_timesteps takes no timesteps "
        "('does not support custom timestep schedules')",
        "num_inference_steps=",
    ),
    Refused(
        "timesteps",
        _LTX_TIMESTEPS,
        "diffusers 0.42.1 raises for any value: the pipeline always passes its own sigmas with it and "
        "retrieve_timesteps allows only one of timesteps and sigmas",
        "num_inference_steps= (the LTX-2 pipelines also sigmas=)",
    ),
    Refused(
        "image_embeds",
        ("SkyReelsV2DiffusionForcingImageToVideoPipeline",),
        "diffusers 0.42.1 has no use for it (the pipeline has no image encoder and its transformer takes no image "
        "features) and fails with any value: with image= it raises 'Cannot forward both', without image= its "
        "preprocessing of the missing image fails",
        "image= (its VAE encoding is the first latent frame)",
    ),
    Refused(
        "action_latents",
        ("Cosmos3OmniPipeline",),
        "diffusers 0.42.1 reads them only in an action-conditioned run (action=, not implemented in vidax): "
        "without action= its transformer fails on them (no embodiment domain ids for the action head)",
    ),
)

#: The input keywords (``image``, ``video``) a vidax class takes where its diffusers namesake's
#: ``__call__`` does not, each a spelling of an input diffusers' takes: (vidax keyword, diffusers
#: pipeline class, diffusers' keyword, diffusers' call that makes the same video). Every other
#: class takes ``image=`` / ``video=`` exactly where diffusers' does (``tests/test_diffusers_keywords.py``).
SPELLINGS: tuple[tuple[str, str, str, str], ...] = (
    (
        "image",
        "LTX2ConditionPipeline",
        "conditions",
        "conditions=[LTX2VideoCondition(frames=image, index=condition_index, strength=condition_strength)]",
    ),
    (
        "video",
        "LTX2ConditionPipeline",
        "conditions",
        "conditions=[LTX2VideoCondition(frames=video, index=condition_index, strength=condition_strength)]",
    ),
)

#: Values of taken keywords vidax refuses: (keyword, value in words, reason).
REFUSED_VALUES: tuple[tuple[str, str, str], ...] = (
    (
        "enable_prompt_enhancement",
        "True",
        "diffusers' default rewrites the prompt by sampling Gemma's decoder (temperature 0.7) from torch's global "
        "generator seeded with prompt_enhancement_seed, a stream vidax cannot reproduce without torch (as generator=); "
        "greedy decoding (prompt_enhancement_kwargs={'do_sample': False}) is not implemented in vidax either; pass the "
        "enhanced prompt as prompt= (diffusers' pipe.enhance_prompt makes it)",
    ),
    ("image", "a float array (and float video frames)", FLOAT_ARRAY_REASON + ": (x * 255).round().astype(np.uint8)"),
    (
        "prompt_template",
        "a dict without 'crop_start', or whose 'template' has no '{}'",
        "without crop_start diffusers measures the template padded to the tokenizer's model_max_length, which crops the "
        "prompt away where the tokenizer has one (give the template's token count before the prompt); without '{}' it "
        "encodes the template alone, ignoring the prompt",
    ),
    (
        "action",
        "anything but None",
        "action-conditioned generation (Cosmos 3's CosmosActionCondition: robot actions with embodiment domain ids) is "
        "not implemented in vidax yet; run text-, image- or video-to-video",
    ),
    ("enable_safety_check", "True", "vidax runs no safety checker (Cosmos' guardrail is a torch package)"),
    (
        "output_type",
        "'pt'",
        "a torch tensor: vidax runs without torch; 'np' gives the same values as a numpy array "
        "(torch.from_numpy(out.frames) makes the tensor)",
    ),
    (
        "callback_on_step_end_tensor_inputs",
        "anything but 'latents'",
        "vidax's step callback hands over and takes back the latents only (the prompt embeddings are fixed for the "
        "compiled denoising loop)",
    ),
)


def refused(pipeline: str, keyword: str) -> Refused | None:
    """The :class:`Refused` entry of ``keyword`` for diffusers pipeline class ``pipeline``, or None."""
    for entry in REFUSED:
        if entry.keyword == keyword and entry.applies(pipeline):
            return entry
    return None


def refused_value_reason(keyword: str) -> str:
    """Why vidax refuses some values of the taken keyword ``keyword`` (its :data:`REFUSED_VALUES` row)."""
    return next(reason for k, _, reason in REFUSED_VALUES if k == keyword)


def refused_anywhere(keyword: str) -> Refused | None:
    """The first :class:`Refused` entry of ``keyword`` for any pipeline, or None."""
    return next((e for e in REFUSED if e.keyword == keyword), None)


def readme_table() -> str:
    """docs/diffusers.md's table of refused keywords (markdown), one row per :data:`REFUSED` entry, then
    one per :data:`REFUSED_VALUES` entry."""
    rows = ["| diffusers keyword | pipelines | why vidax refuses it | vidax instead |", "|---|---|---|---|"]
    for e in REFUSED:
        where = "all" if e.pipelines == EVERY else ", ".join(e.pipelines)
        rows.append(f"| `{e.keyword}` | {where} | {e.reason} | {('`' + e.instead + '`') if e.instead else '-'} |")
    for keyword, value, reason in REFUSED_VALUES:
        rows.append(f"| `{keyword}` = {value} | all that take it | {reason} | - |")
    return "\n".join(rows)


__all__ = (
    "Refused",
    "REFUSED",
    "REFUSED_VALUES",
    "SPELLINGS",
    "EVERY",
    "refused",
    "refused_anywhere",
    "refused_value_reason",
    "readme_table",
)
