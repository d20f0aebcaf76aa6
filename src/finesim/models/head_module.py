"""The one save/load base of finesim's trainable heads (condition, projection and regression heads).

A head is a sentence-transformers module: its constructor arguments are listed in ``config_keys`` and saved as
the module's config, its weights as safetensors, so a saved model reloads it with its trained parameters.
"""

from __future__ import annotations

from typing import Any

from sentence_transformers.base.modules.module import Module

HUB_KWARGS = ("token", "cache_folder", "revision", "local_files_only")


class HeadModule(Module):
    """Base class: ``save`` writes the config and the weights, ``load`` rebuilds the head from both."""

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> Any:
        """Rebuild the head from its saved config and load its trained weights."""
        hub = {k: kwargs[k] for k in HUB_KWARGS if k in kwargs}
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        head = cls(**config)
        cls.load_torch_weights(model_name_or_path, subfolder=subfolder, model=head, **hub)
        return head
