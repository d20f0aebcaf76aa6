"""The one save/load base of finesim's trainable heads (condition, projection and regression heads).

A head is a sentence-transformers module: its constructor arguments are listed in ``config_keys`` and saved as
the module's config, its weights as safetensors, so a saved model reloads it with its trained parameters.
"""

from __future__ import annotations

from typing import Any

from sentence_transformers.base.modules.module import Module


class HeadModule(Module):
    """Base class: ``save`` writes the config and the weights, ``load`` rebuilds the head from both."""

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        init_defaults: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:  # the head (Self; Any keeps this file's imports to typing, torch and sentence-transformers: portable.py)
        """Rebuild the head from its saved config and load its trained weights (``Module.load``'s signature;
        ``init_defaults`` and the other keyword arguments a model passes to every module are not used: a head's
        saved config names all its arguments)."""
        hub: dict[str, Any] = {
            "token": token,
            "cache_folder": cache_folder,
            "revision": revision,
            "local_files_only": local_files_only,
        }
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        head = cls(**config)
        cls.load_torch_weights(model_name_or_path, subfolder=subfolder, model=head, **hub)
        return head
