"""LoRA for every family: files in the diffusers/PEFT, kohya, original-repository/ComfyUI and
LightX2V layouts (:mod:`.formats`), placed through each family's own key rules (:mod:`.targets`),
merged exactly and undone bit for bit (:mod:`.apply`), managed per pipeline as diffusers'
loaders (:mod:`.adapters`; ``pipe.load_lora_weights`` and friends on
:class:`vidax.pipelines.base.VideoPipeline`)."""
